/* self_tf MODE [K]: a program's own single-step works while counting is on (DESIGN §4.7): it sets
 * TF itself (pushf; or; popf) and gets one SIGTRAP after each following instruction until its
 * handler clears TF in the K-th trap's saved flags. MODE: perf or lwp (counted_window.h).
 *     body     pushf; orq $0x100,(%rsp); popf; nop x 20                            23
 *     handler  incq traps; mov traps,%rax; cmp limit,%rax; jb 1f; 1: ret           5 per trap,
 *              (the K-th: ...; jb not taken; mov efl,%rax; andq $~0x100,(%rdx,%rax); ret)  7
 *     restorer mov $15,%rax; syscall                                             2 per trap
 * Linux enters the handler with TF clear and rt_sigreturn restores it, so the traps come after
 * nop 1 .. nop K: K SIGTRAPs, and B = 23 + 7K + 2 counted instructions (perf: B + 5,
 * LWP: B + 1).
 * Prints "self_tf: MODE traps T expected K, counted C expected E"; exits 0 only when both match. */
#define _GNU_SOURCE
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include "guest/linux/counted_window.h"

uint64_t traps, limit, efl_offset;
void on_trap(int, siginfo_t *, void *);
__asm__(".text\n"
        ".globl on_trap\n"
        "on_trap:\n"
        "  incq traps(%rip)\n"
        "  mov traps(%rip), %rax\n"
        "  cmp limit(%rip), %rax\n"
        "  jb 1f\n"
        "  mov efl_offset(%rip), %rax\n"
        "  andq $~0x100, (%rdx,%rax)\n"
        "1: ret\n");

COUNTED_WINDOW(tf_window, "  pushf\n  orq $0x100, (%rsp)\n  popf\n  .rept 20\n  nop\n  .endr\n")

int main(int argc, char **argv) {
  if (argc < 2) {
    say("usage: self_tf perf|lwp|none [K]\n");
    return 2;
  }
  const long k = window_count_arg(argc, argv, 2, 10, 1, 20, "self_tf: K");
  if (k < 0) return 2;
  limit = (uint64_t)k;
  efl_offset = offsetof(ucontext_t, uc_mcontext.gregs[REG_EFL]);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_trap;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGTRAP, &sa, NULL) != 0) {
    say("self_tf: FAIL: sigaction\n");
    return 1;
  }
  struct counter c;
  if (counter_open(&c, argv[1]) != 0) return 1;
  const int64_t body = 23 + 7 * (int64_t)limit + 2;
  int64_t expected = body;
  if (c.lwp) {
    tf_window_lwp(c.cb, NULL);
    expected += CW_LWP_STOP_INSTRUCTIONS;
  } else {
    tf_window_perf(c.fd, NULL);
    expected += CW_PERF_STOP_INSTRUCTIONS;
  }
  const int64_t counted = counter_read(&c);
  say("self_tf: %s traps %llu expected %llu, counted %lld expected %lld\n", argv[1],
      (unsigned long long)traps, (unsigned long long)limit, (long long)counted, (long long)expected);
  return traps == limit && counter_exact(&c, counted, expected) ? 0 : 1;
}
