/* hazard_count MODE CASE [M]: what can fault, trap or change its own decode inside a counted
 * stretch of user code is counted as the CPU retires it (DESIGN §4.7, "What a block may
 * contain"). MODE: perf or lwp (counted_window.h). Each CASE runs one window; a fault
 * in it is a SIGSEGV whose handler (on_segv below, SA_SIGINFO) counts the fault, adds up where
 * it happened (the frame's RIP), notes whether the frame's RFLAGS carries TF (the program never
 * sets it: any TF there is the stepper's) and resumes at `resume_at`:
 *     on_segv   incq faults; mov RIP(%rdx),%rax; add %rax,fault_rips; mov resume_at,%rax;
 *               mov %rax,RIP(%rdx); mov EFL(%rdx),%rax; and $0x100,%eax; add %rax,tf_seen; ret  9
 *     restorer  mov $15,%rax; syscall                                                        2
 * so each fault adds F = 11 retired instructions; the faulting instruction itself does not retire.
 * Windows that fault set resume_at first (lea 2f(%rip),%rcx; mov %rcx,resume_at(%rip): 2).
 *   nx        (case 1) a JMP through a register to a readable page without execute permission:
 *             2 + 2 + M x { jmp *%rax (retires; the fetch there faults) F; dec; jnz } = 4 + 14M
 *   runoff    (case 1) straight-line code off the end of an executable page into one without:
 *             2 + 2 + M x { jmp *%rax; add $1,%rdx; add $1,%rdx (the page's last 8 bytes), the
 *             fetch of the next page faults, F; dec; jnz } = 4 + 16M
 *   straddle  (case 2) a register instruction (add %rbx,%rax: 48 01 d8) whose last byte lies on
 *             the page without execute permission: its fetch faults, it never retires:
 *             4 + M x { jmp; F; dec; jnz } = 4 + 14M
 *   segment   (case 3) a null selector loaded into FS, then an FS-relative load:
 *             2 + xor %eax,%eax; mov %eax,%fs; mov %fs:0x10,%rbx; nop = 6, or 5 + F where the load
 *             faults (a null selector clears the base on Intel CPUs; AMD's keep it): the handler
 *             says which
 *   alias     (case 4) code that patches the instruction after its own store through a second
 *             mapping of the same page: `jmp +4` becomes two NOPs, so the four NOPs it jumped
 *             over run too:  4 + M x { movw $0x04eb,(%rdi) (restore, via the alias);
 *             call *%rax; mov %bx,(%rdi); nop x 2; nop x 4; nop; ret; dec; jnz } = 4 + 13M
 *   breakpoint (case 5) signal_count's body under a perf hardware breakpoint (a write watchpoint
 *             on a variable nothing writes), which holds one of the four debug slots:
 *             2 + 5 + (2M + 2) + 2 = 2M + 11
 *   smp       (case 7; needs two CPUs) a loop whose load's page a second thread, on the other
 *             CPU, keeps zapping with madvise(MADV_DONTNEED): the load faults (where it is the
 *             first instruction of the stepper's block or a later one), and is restarted:
 *             2 + M x { add $1,%rax; mov (%rdi),%rbx; add %rbx,%rax; dec %ecx; jnz } = 2 + 5M
 *             ("zaps Z": the madvise calls that succeeded; 0 means nothing was tested)
 * M is 1..100000 (20 by default; under LWP at most ~800: its ring holds 4096 records).
 * perf counts B + 5, LWP stores B + 1 records (counted_window.h).
 * Prints "hazard_count: MODE CASE counted C expected E, tf leaks T" (and the faults, and whether
 * they came where x86 faults, or the zaps seen) and exits 0 only when C == E and T == 0. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/hw_breakpoint.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/ucontext.h>
#include <unistd.h>

#include "guest/linux/counted_window.h"

_Static_assert(offsetof(ucontext_t, uc_mcontext.gregs[REG_RIP]) == 168, "on_segv's RIP offset");
_Static_assert(offsetof(ucontext_t, uc_mcontext.gregs[REG_EFL]) == 176, "on_segv's EFL offset");

#define FAULT_COST 11 /* on_segv 9 + restorer 2 */
#define PAGE 4096

uint64_t resume_at, faults, tf_seen, fault_rips;
void on_segv(int, siginfo_t *, void *);
/* (.pushsection: the C variables after these blocks must not land in .text, where GCC, which
 * does not read top-level asm, would think its last section still is.) */
__asm__(".pushsection .text\n"
        ".globl on_segv\n"
        "on_segv:\n"
        "  incq faults(%rip)\n"
        "  mov 168(%rdx), %rax\n"
        "  add %rax, fault_rips(%rip)\n"
        "  mov resume_at(%rip), %rax\n"
        "  mov %rax, 168(%rdx)\n"
        "  mov 176(%rdx), %rax\n"
        "  and $0x100, %eax\n"
        "  add %rax, tf_seen(%rip)\n"
        "  ret\n"
        ".popsection\n");

uint64_t loops;
void on_usr1(int);
__asm__(".pushsection .text\n"
        ".globl on_usr1\n"
        "on_usr1:\n"
        "  mov loops(%rip), %ecx\n"
        "1: dec %ecx\n"
        "  jnz 1b\n"
        "  ret\n"
        ".popsection\n");

#define RESUME "  lea 2f(%rip), %rcx\n  mov %rcx, resume_at(%rip)\n"

/* arg: the place to jump to, M. */
COUNTED_WINDOW(jump_window, RESUME "  mov (%r14), %rax\n  mov 8(%r14), %ebx\n"
                                   "1: jmp *%rax\n"
                                   "2: dec %ebx\n  jnz 1b\n")

COUNTED_WINDOW(segment_window, RESUME "  xor %eax, %eax\n  mov %eax, %fs\n"
                                      "  mov %fs:0x10, %rbx\n"
                                      "2: nop\n")

/* arg: the code, the alias of its patched instruction, M. */
COUNTED_WINDOW(alias_window, "  mov (%r14), %rax\n  mov 8(%r14), %rdi\n  mov $0x9090, %ebx\n"
                             "  mov 16(%r14), %ecx\n"
                             "1: movw $0x04eb, (%rdi)\n  call *%rax\n  dec %ecx\n  jnz 1b\n")

/* arg: tgid, tid (signal_count's body). */
COUNTED_WINDOW(breakpoint_window,
               "  mov (%r14), %r12\n  mov 8(%r14), %r13\n"
               "  mov $234, %eax\n  mov %r12, %rdi\n  mov %r13, %rsi\n  mov $10, %edx\n  syscall\n")

/* arg: the page, M. */
COUNTED_WINDOW(smp_window, "  mov (%r14), %rdi\n  mov 8(%r14), %ecx\n"
                           "1: add $1, %rax\n  mov (%rdi), %rbx\n  add %rbx, %rax\n  dec %ecx\n"
                           "  jnz 1b\n")

static int64_t run_window(struct counter *c, uint64_t (*perf)(int, void *),
                          uint64_t (*lwp)(struct lwpcb *, void *), void *arg) {
  counter_reset(c);
  if (c->lwp)
    lwp(c->cb, arg);
  else
    perf(c->fd, arg);
  return counter_read(c);
}

/* Two pages: the first executable (PROT_EXEC), the second readable and writable only. */
static uint8_t *exec_then_noexec(void) {
  uint8_t *p = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE | PROT_EXEC,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) return NULL;
  memset(p, 0x90, 2 * PAGE);
  if (mprotect(p + PAGE, PAGE, PROT_READ | PROT_WRITE) != 0) return NULL;
  return p;
}

static volatile int zapping, stop_zapping;
static volatile uint64_t zaps;
static void *zapper(void *page) {
  if (pin_to_cpu(1) != 0) return NULL;
  zapping = 1;
  while (!stop_zapping)
    if (madvise(page, PAGE, MADV_DONTNEED) == 0) ++zaps; /* only a zap that happened */
  return NULL;
}

/* The window of CASE; sets *expected (the body's B) and *note; -2 for an unknown case. */
static int64_t run_case(struct counter *c, const char *name, long m, int64_t *expected,
                        char *note, size_t note_size) {
  faults = tf_seen = 0;
  note[0] = 0;
  if (!strcmp(name, "nx") || !strcmp(name, "runoff") || !strcmp(name, "straddle")) {
    uint8_t *p = exec_then_noexec();
    if (!p) return -1;
    uint64_t arg[2] = {0, (uint64_t)m};
    /* Where each iteration's fault must be: the first byte that cannot be fetched. */
    uint64_t fault_at;
    if (!strcmp(name, "nx")) {
      arg[0] = fault_at = (uint64_t)(uintptr_t)(p + PAGE);
    } else if (!strcmp(name, "runoff")) {
      /* add $1,%rdx twice (the loop keeps its target in %rax) */
      static const uint8_t adds[8] = {0x48, 0x83, 0xc2, 0x01, 0x48, 0x83, 0xc2, 0x01};
      memcpy(p + PAGE - 8, adds, 8);
      arg[0] = (uint64_t)(uintptr_t)(p + PAGE - 8);
      fault_at = (uint64_t)(uintptr_t)(p + PAGE);
    } else {
      p[PAGE - 2] = 0x48, p[PAGE - 1] = 0x01, p[PAGE] = 0xd8; /* add %rbx,%rax */
      arg[0] = fault_at = (uint64_t)(uintptr_t)(p + PAGE - 2);
    }
    fault_rips = 0;
    const int64_t counted = run_window(c, jump_window_perf, jump_window_lwp, arg);
    /* Each iteration: the jmp, what runs before the fault (runoff: two adds), F, dec, jnz. */
    *expected = 4 + m * (1 + (!strcmp(name, "runoff") ? 2 : 0) + FAULT_COST + 2);
    if ((int64_t)faults != m) *expected = -1;
    snprintf(note, note_size, ", faults %llu%s", (unsigned long long)faults,
             fault_rips == (uint64_t)m * fault_at ? " where x86 faults" : " ELSEWHERE");
    munmap(p, 2 * PAGE);
    return counted;
  }
  if (!strcmp(name, "segment")) {
    uint64_t base = 0;
    if (syscall(SYS_arch_prctl, 0x1003 /* ARCH_GET_FS */, &base) != 0) return -1;
    int64_t counted;
    counter_reset(c);
    if (c->lwp)
      segment_window_lwp(c->cb, NULL);
    else
      segment_window_perf(c->fd, NULL);
    /* FS's base is gone where the null selector cleared it: back before any use of TLS. */
    long rc;
    __asm__ volatile("syscall" : "=a"(rc) : "0"(SYS_arch_prctl), "D"(0x1002), "S"(base)
                     : "rcx", "r11", "memory");
    if (rc != 0) return -1;
    counted = counter_read(c);
    *expected = faults ? 5 + FAULT_COST : 6;
    snprintf(note, note_size, ", the load %s", faults ? "faulted" : "kept the base");
    return counted;
  }
  if (!strcmp(name, "alias")) {
    /* A file in the initramfs's ramfs, mapped twice: executable, and writable. */
    const int fd = open("/hazard_alias", O_RDWR | O_CREAT | O_TRUNC, 0700);
    if (fd < 0 || ftruncate(fd, PAGE) != 0) return -1;
    uint8_t *code = mmap(NULL, PAGE, PROT_READ | PROT_EXEC, MAP_SHARED, fd, 0);
    uint8_t *alias = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (code == MAP_FAILED || alias == MAP_FAILED) return -1;
    /* mov %bx,(%rdi); jmp +4; nop x 4; nop; ret */
    static const uint8_t bytes[] = {0x66, 0x89, 0x1f, 0xeb, 0x04, 0x90, 0x90,
                                    0x90, 0x90, 0x90, 0xc3};
    memcpy(alias, bytes, sizeof bytes);
    uint64_t arg[3] = {(uint64_t)(uintptr_t)code, (uint64_t)(uintptr_t)(alias + 3), (uint64_t)m};
    const int64_t counted = run_window(c, alias_window_perf, alias_window_lwp, arg);
    *expected = 4 + 13 * m;
    munmap(code, PAGE);
    munmap(alias, PAGE);
    unlink("/hazard_alias");
    return counted;
  }
  if (!strcmp(name, "breakpoint")) {
    static volatile uint64_t watched;
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_BREAKPOINT;
    attr.bp_type = HW_BREAKPOINT_W;
    attr.bp_addr = (uint64_t)(uintptr_t)&watched;
    attr.bp_len = HW_BREAKPOINT_LEN_8;
    attr.sample_period = 1;
    attr.exclude_kernel = 1;
    const int bp = (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
    if (bp < 0) {
      say("hazard_count: FAIL: perf_event_open breakpoint: %m\n");
      return -1;
    }
    loops = (uint64_t)m;
    uint64_t ids[2] = {(uint64_t)getpid(), (uint64_t)syscall(SYS_gettid)};
    const int64_t counted = run_window(c, breakpoint_window_perf, breakpoint_window_lwp, ids);
    *expected = 2 * m + 11;
    close(bp);
    return counted;
  }
  if (!strcmp(name, "smp")) {
    uint8_t *page = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED || pin_to_cpu(0) != 0) return -1;
    pthread_t t;
    zapping = stop_zapping = 0;
    zaps = 0;
    if (pthread_create(&t, NULL, zapper, page) != 0) return -1;
    while (!zapping) {
    }
    uint64_t arg[2] = {(uint64_t)(uintptr_t)page, (uint64_t)m};
    const int64_t counted = run_window(c, smp_window_perf, smp_window_lwp, arg);
    stop_zapping = 1;
    pthread_join(t, NULL);
    *expected = 2 + 5 * m;
    snprintf(note, note_size, ", zaps %llu", (unsigned long long)zaps);
    return counted;
  }
  return -2;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    say("usage: hazard_count perf|lwp|none nx|runoff|straddle|segment|alias|breakpoint|smp [M]\n");
    return 2;
  }
  const long m = window_count_arg(argc, argv, 3, 20, 1, 100000, "hazard_count: M");
  if (m < 0) return 2;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  struct sigaction usr1;
  memset(&usr1, 0, sizeof usr1);
  usr1.sa_handler = on_usr1;
  sigemptyset(&usr1.sa_mask);
  if (sigaction(SIGSEGV, &sa, NULL) != 0 || sigaction(SIGUSR1, &usr1, NULL) != 0) {
    say("hazard_count: FAIL: sigaction\n");
    return 1;
  }
  struct counter c;
  if (counter_open(&c, argv[1]) != 0) return 1;
  int64_t body = 0;
  char note[64];
  const int64_t counted = run_case(&c, argv[2], m, &body, note, sizeof note);
  if (counted == -2) {
    say("hazard_count: FAIL: no case %s\n", argv[2]);
    return 2;
  }
  if (body < 0) {
    say("hazard_count: FAIL: %s: %llu faults, %ld expected\n", argv[2],
        (unsigned long long)faults, m);
    return 1;
  }
  const int64_t expected =
      body + (c.lwp ? CW_LWP_STOP_INSTRUCTIONS : CW_PERF_STOP_INSTRUCTIONS);
  say("hazard_count: %s %s counted %lld expected %lld, tf leaks %llu%s\n", argv[1], argv[2],
      (long long)counted, (long long)expected, (unsigned long long)(tf_seen >> 8), note);
  return counter_exact(&c, counted, expected) && tf_seen == 0 ? 0 : 1;
}
