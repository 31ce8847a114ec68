/* lwp_sigill: without LWP (CPUID 0x80000001 ECX[15] clear), LLWPCB is an invalid opcode and the
 * task gets SIGILL (DESIGN.md §4.9). Executes `llwpcb rax` with RAX = 0 (harmless where LWP
 * exists: it only turns LWP off), catches SIGILL with sigsetjmp/siglongjmp and checks the
 * faulting RIP is the LLWPCB. Exit 0 and "lwp_sigill: SIGILL at llwpcb" if SIGILL came; exit 1
 * and "lwp_sigill: no SIGILL: LLWPCB executed" otherwise (the expected result under a profile with
 * LWP). Runs natively on a host without LWP too. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <ucontext.h>

#include "guest/linux/lwp_linux.h"

static sigjmp_buf back;
static volatile uint64_t fault_rip;
extern const char sigill_llwpcb[];

static void on_sigill(int sig, siginfo_t *info, void *context) {
  (void)sig;
  (void)info;
  fault_rip = (uint64_t)((ucontext_t *)context)->uc_mcontext.gregs[REG_RIP];
  siglongjmp(back, 1);
}

int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigill;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGILL, &sa, NULL);
  if (sigsetjmp(back, 1) == 0) {
    uint64_t rax = 0;
    __asm__ volatile(".globl sigill_llwpcb\nsigill_llwpcb:\n" LLWPCB_RAX : "+a"(rax) : : "memory");
    say("lwp_sigill: no SIGILL: LLWPCB executed\n");
    return 1;
  }
  if (fault_rip != (uint64_t)(uintptr_t)sigill_llwpcb) {
    say("lwp_sigill: SIGILL at %#llx, not at the llwpcb %p\n", (unsigned long long)fault_rip,
        (void *)sigill_llwpcb);
    return 1;
  }
  say("lwp_sigill: SIGILL at llwpcb\n");
  return 0;
}
