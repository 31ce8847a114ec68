/* syscall_check: the syscall ABI of DESIGN.md §4.4 checked from ring 3. For write, yield,
 * lwp_wait, lwp_info and an unknown number, every register but rax, rcx and r11 must come back
 * unchanged (rsp too: the helper returns through its own stack), and each result must be the
 * documented one. exit (syscall 0) ends the program with the status the VMM reports.
 * Prints one PASS/FAIL line per check; exits 1 if any failed, else 0. */
#include "guest/lib/pmuvm.h"

/* Registers after the syscall, in this order. */
enum { RBX, RBP, RDI, RSI, RDX, R8, R9, R10, R12, R13, R14, R15, NREGS };
static const char *const names[NREGS] = {"rbx", "rbp", "rdi", "rsi", "rdx", "r8",
                                         "r9",  "r10", "r12", "r13", "r14", "r15"};

/* long checked_syscall(long nr, long a0, long a1, long a2, uint64_t after[NREGS])
 * Loads a0-a2 into rdi/rsi/rdx and a distinct pattern into every other preserved register,
 * issues `syscall`, stores all of them into after[] and returns rax. */
long checked_syscall(long nr, long a0, long a1, long a2, uint64_t *after);
__asm__(
    ".text\n"
    ".globl checked_syscall\n"
    "checked_syscall:\n"
    "  push %rbx\n  push %rbp\n  push %r12\n  push %r13\n  push %r14\n  push %r15\n"
    "  push %r8\n"                     /* after[] */
    "  mov %rdi, %rax\n"
    "  mov %rsi, %rdi\n"
    "  mov %rdx, %rsi\n"
    "  mov %rcx, %rdx\n"
    "  movabs $0x0B0B0B0B0B0B0B0B, %rbx\n"
    "  movabs $0x0B9B9B9B9B9B9B9B, %rbp\n"
    "  movabs $0x0808080808080808, %r8\n"
    "  movabs $0x0909090909090909, %r9\n"
    "  movabs $0x1010101010101010, %r10\n"
    "  movabs $0x1212121212121212, %r12\n"
    "  movabs $0x1313131313131313, %r13\n"
    "  movabs $0x1414141414141414, %r14\n"
    "  movabs $0x1515151515151515, %r15\n"
    "  syscall\n"
    "  mov (%rsp), %rcx\n"             /* rcx is the kernel's to clobber: use it for after[] */
    "  mov %rbx, 0(%rcx)\n  mov %rbp, 8(%rcx)\n  mov %rdi, 16(%rcx)\n  mov %rsi, 24(%rcx)\n"
    "  mov %rdx, 32(%rcx)\n  mov %r8, 40(%rcx)\n  mov %r9, 48(%rcx)\n  mov %r10, 56(%rcx)\n"
    "  mov %r12, 64(%rcx)\n  mov %r13, 72(%rcx)\n  mov %r14, 80(%rcx)\n  mov %r15, 88(%rcx)\n"
    "  pop %r8\n"
    "  pop %r15\n  pop %r14\n  pop %r13\n  pop %r12\n  pop %rbp\n  pop %rbx\n"
    "  ret\n");

static int failed;

static void check(const char *call, long nr, long a0, long a1, long a2, long want) {
  uint64_t after[NREGS];
  const uint64_t expected[NREGS] = {0x0B0B0B0B0B0B0B0Bull, 0x0B9B9B9B9B9B9B9Bull, (uint64_t)a0,
                                    (uint64_t)a1,         (uint64_t)a2,         0x0808080808080808ull,
                                    0x0909090909090909ull, 0x1010101010101010ull, 0x1212121212121212ull,
                                    0x1313131313131313ull, 0x1414141414141414ull, 0x1515151515151515ull};
  const long got = checked_syscall(nr, a0, a1, a2, after);
  int ok = got == want;
  if (!ok) printf_("syscall_check: FAIL: %s returned %ld, expected %ld\n", call, got, want);
  for (int i = 0; i < NREGS; ++i)
    if (after[i] != expected[i]) {
      ok = 0;
      printf_("syscall_check: FAIL: %s changed %s: %#llx -> %#llx\n", call, names[i],
              (unsigned long long)expected[i], (unsigned long long)after[i]);
    }
  if (ok) printf_("syscall_check: PASS: %s preserves registers and returns %ld\n", call, got);
  else ++failed;
}

static const char message[] = "syscall_check: write from ring 3\n";

int main(void) {
  struct lwp_info info;
  check("write", PMUVM_SYS_WRITE, 1, (long)message, sizeof message - 1, sizeof message - 1);
  check("yield", PMUVM_SYS_YIELD, 0, 0, 0, 0);
  check("lwp_wait(0)", PMUVM_SYS_LWP_WAIT, 0, 0, 0, 0);
  check("lwp_info", PMUVM_SYS_LWP_INFO, (long)&info, 0, 0, 0);
  check("unknown syscall 99", 99, 0, 0, 0, -38);
  printf_("syscall_check: %s\n", failed ? "FAILED" : "all passed");
  return failed ? 1 : 0;
}
