/* smoke_test MODE: a user program for the QEMU smoke test (qemu_smoke/run.py).
 *   sys          syscall error paths, lwp_info, pmc_*, lwp_wait with a timeout, preserved registers
 *   spin LABEL   three CPU-bound rounds (timer preemption between two copies)
 *   null kernel int3 ud2 gp tramp rodata nx   one fault each (ends with 128 + vector) */
#include "guest/lib/pmuvm.h"
#include "guest/lib/lwp.h"

static volatile uint64_t sink;

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "sys";
  if (!strcmp(mode, "sys")) {
    printf_("smoke_test: bad syscall -> %ld\n", pmuvm_syscall0(99));
    printf_("smoke_test: write bad fd -> %ld\n", sys_write(5, "x", 1));
    printf_("smoke_test: write kernel ptr -> %ld\n", sys_write(1, (void *)0x100000, 4));
    printf_("smoke_test: write unmapped -> %ld\n", sys_write(1, (void *)0x10000000, 4));
    struct lwp_info li;
    printf_("smoke_test: lwp_info -> %ld eax=%#x\n", sys_lwp_info(&li), li.eax);
    printf_("smoke_test: lwp_info ro -> %ld\n", sys_lwp_info((void *)0x400000));
    printf_("smoke_test: pmc_config -> %ld, pmc_read -> %ld, pmc_pmis -> %ld\n",
            sys_pmc_config(12, 0x3B8, 0x04000204, 0x00039000, 0), sys_pmc_read(12), sys_pmc_pmis(12));
    printf_("smoke_test: lwp_wait(0) -> %ld\n", sys_lwp_wait(0));
    printf_("smoke_test: lwp_wait(30) -> %ld\n", sys_lwp_wait(30));
    /* registers preserved across syscall (all but rax, rcx, r11) */
    uint64_t rbx = 0x1111, rdx_ = 0, r12 = 0x1212, r13 = 0x1313, r14 = 0x1414, r15 = 0x1515, rbp_save;
    register uint64_t r9 __asm__("r9") = 0x0909;
    register uint64_t r10 __asm__("r10") = 0x1010;
    register uint64_t r8 __asm__("r8") = 0x0808;
    uint64_t rsi = 0x5151, rdi = 0x4444, rax = PMUVM_SYS_YIELD;
    __asm__ volatile("mov %%rbp, %[save]\n\tmov $0xB0B0, %%rbp\n\tsyscall\n\tmov %%rbp, %[rdxo]\n\tmov %[save], %%rbp"
                     : "+a"(rax), "+b"(rbx), [rdxo]"=&d"(rdx_), "+S"(rsi), "+D"(rdi), "+r"(r8), "+r"(r9), "+r"(r10), [save]"=m"(rbp_save)
                     : : "rcx", "r11", "memory");
    __asm__ volatile("" : "+r"(r12), "+r"(r13), "+r"(r14), "+r"(r15));
    printf_("smoke_test: preserved: rbx %s rsi %s rdi %s r8 %s r9 %s r10 %s rbp %s\n", rbx == 0x1111 ? "ok" : "BAD",
            rsi == 0x5151 ? "ok" : "BAD", rdi == 0x4444 ? "ok" : "BAD", r8 == 0x0808 ? "ok" : "BAD",
            r9 == 0x0909 ? "ok" : "BAD", r10 == 0x1010 ? "ok" : "BAD", rdx_ == 0xB0B0 ? "ok" : "BAD");
    return 0;
  }
  if (!strcmp(mode, "spin")) {
    for (int round = 0; round < 3; ++round) {
      for (uint64_t i = 0; i < 20000000; ++i) sink += i;
      printf_("smoke_test %s: spin round %d\n", argv[2], round);
    }
    return 0;
  }
  if (!strcmp(mode, "null")) { printf_("smoke_test: %d\n", *(volatile int *)0); return 0; }
  if (!strcmp(mode, "kernel")) { printf_("smoke_test: %d\n", *(volatile int *)0x100000); return 0; }
  if (!strcmp(mode, "int3")) { __asm__ volatile("int3"); return 0; }
  if (!strcmp(mode, "ud2")) { __asm__ volatile("ud2"); return 0; }
  if (!strcmp(mode, "gp")) { __asm__ volatile("cli"); return 0; }
  if (!strcmp(mode, "tramp")) { ((void (*)(void))0x7FFFFFFFE000ull)(); return 0; }
  if (!strcmp(mode, "rodata")) { *(volatile char *)"abc" = 1; return 0; }
  if (!strcmp(mode, "nx")) { static uint8_t code[16] = {0xc3}; ((void (*)(void))code)(); return 0; }
  return 3;
}
