/* signal_count MODE [M]: a signal handler's instructions, and its restorer's, count like any
 * other user instructions of the task (DESIGN §4.7). MODE: perf or lwp (counted_window.h).
 * The window sends itself SIGUSR1 with a raw tgkill; the kernel runs the handler on the way back
 * from that syscall, then glibc's restorer (__restore_rt: mov $15,%rax; syscall), whose
 * rt_sigreturn resumes the window after the tgkill:
 *     body   mov $234,%eax; mov %r12,%rdi; mov %r13,%rsi; mov $10,%edx; syscall   5
 *     handler  mov loops(%rip),%ecx; 1: dec %ecx; jnz 1b; ret                   2M + 2
 *     restorer mov $15,%rax; syscall                                             2
 * B = 2M + 9 retired user instructions: perf counts B + 5, LWP stores B + 1 records, the first 5
 * at the body, the next 2M + 2 in the handler, 2 at the restorer and the last at the window's
 * stop (counted_window.h).
 * Prints "signal_count: MODE counted C expected E" and exits 0 only when C == E (and, for LWP,
 * every record lies where it should). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "guest/linux/counted_window.h"

uint64_t loops;
void on_usr1(int);
extern const char on_usr1_end[];
__asm__(".text\n"
        ".globl on_usr1\n"
        "on_usr1:\n"
        "  mov loops(%rip), %ecx\n"
        "1: dec %ecx\n"
        "  jnz 1b\n"
        "  ret\n"
        ".globl on_usr1_end\n"
        "on_usr1_end:\n");

/* r12 = tgid, r13 = tid: set by the caller through arg (two words). */
COUNTED_WINDOW(signal_window,
               "  mov (%r14), %r12\n  mov 8(%r14), %r13\n"
               "  mov $234, %eax\n  mov %r12, %rdi\n  mov %r13, %rsi\n  mov $10, %edx\n  syscall\n")

int main(int argc, char **argv) {
  if (argc < 2) {
    say("usage: signal_count perf|lwp|none [M]\n");
    return 2;
  }
  const long m = window_count_arg(argc, argv, 2, 100, 1, 1000, "signal_count: M");
  if (m < 0) return 2;
  loops = (uint64_t)m;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigemptyset(&sa.sa_mask);
  struct sigaction installed;
  if (sigaction(SIGUSR1, &sa, NULL) != 0 || sigaction(SIGUSR1, NULL, &installed) != 0) {
    say("signal_count: FAIL: sigaction\n");
    return 1;
  }
  struct counter c;
  if (counter_open(&c, argv[1]) != 0) return 1;
  uint64_t ids[2] = {(uint64_t)getpid(), (uint64_t)syscall(SYS_gettid)};
  /* Two word loads of arg precede the counted body: they count too. */
  const int64_t body = 2 + 5 + (int64_t)(2 * loops + 2) + 2;
  int64_t expected, counted;
  int bad = 0;
  if (c.lwp) {
    signal_window_lwp(c.cb, ids);
    counted = counter_read(&c);
    expected = body + CW_LWP_STOP_INSTRUCTIONS;
    /* Where each record lies: the window's 7, the handler's 2M + 2, the restorer's 2, and the
     * window's stop (counted_window.h). */
    const uint64_t restorer = (uint64_t)(uintptr_t)installed.sa_restorer;
    for (int64_t i = 0; counted == expected && i < counted; ++i) {
      const uint64_t rip = counter_record_rip(&c, (uint32_t)i);
      const int in_body = rip >= (uint64_t)(uintptr_t)signal_window_lwp_body &&
                          rip < (uint64_t)(uintptr_t)signal_window_lwp_end;
      const int in_handler = rip >= (uint64_t)(uintptr_t)on_usr1 &&
                             rip < (uint64_t)(uintptr_t)on_usr1_end;
      const int in_restorer = rip >= restorer && rip < restorer + 16;
      const int at_stop =
          rip == (uint64_t)(uintptr_t)signal_window_lwp_end + CW_SLWPCB_LENGTH;
      const int want_body = i < 7, want_handler = i >= 7 && i < 7 + (int64_t)(2 * loops + 2);
      if ((want_body && !in_body) || (want_handler && !in_handler) ||
          (!want_body && !want_handler && i + 1 < counted && !in_restorer) ||
          (i + 1 == counted && !at_stop)) {
        say("signal_count: FAIL: record %lld at rip %#llx\n", (long long)i, (unsigned long long)rip);
        bad = 1;
        break;
      }
    }
  } else {
    signal_window_perf(c.fd, ids);
    counted = counter_read(&c);
    expected = body + CW_PERF_STOP_INSTRUCTIONS;
  }
  say("signal_count: %s counted %lld expected %lld\n", argv[1], (long long)counted,
      (long long)expected);
  return counter_exact(&c, counted, expected) && !bad ? 0 : 1;
}
