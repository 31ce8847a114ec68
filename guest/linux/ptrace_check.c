/* ptrace_check MODE step|bp [K]: a tracer's single-steps and hardware breakpoints work exactly on
 * a child that counts its own instructions meanwhile (DESIGN §4.7: the guest's own debugging
 * keeps working while LWP or NetBurst counts). MODE: perf or lwp (counted_window.h).
 * The child (a fork, so it has this program's addresses) stops itself with SIGSTOP, then runs
 *     body   mov %r14,%rcx; 1: nop; dec %rcx; jnz 1b                               1 + 3K
 * in a counted window and exits 0 only when its counter is exact (perf 1 + 3K + 5, LWP 1 + 3K + 1).
 * The tracer:
 *   step: puts an execution breakpoint on the body's first instruction (DR0 and DR7 through
 *         PTRACE_POKEUSER), continues, then PTRACE_SINGLESTEPs until RIP reaches the body's
 *         end: exactly 1 + 3K steps;
 *   bp:   puts the breakpoint on the loop's `dec`, continues after every stop: exactly K hits.
 * Prints "ptrace_check: MODE ACTION steps|hits N expected E, child's count exact|wrong" and
 * exits 0 only when both are right. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <unistd.h>

#include "guest/linux/counted_window.h"
#include "guest/linux/tracer.h"

COUNTED_WINDOW(traced_window, "  mov %r14, %rcx\n1: nop\n  dec %rcx\n  jnz 1b\n")

static int child(const char *mode, uint64_t k) {
  struct counter c;
  if (counter_open(&c, mode) != 0) return 1;
  if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) != 0) return 1;
  raise(SIGSTOP);
  int64_t expected = 1 + 3 * (int64_t)k;
  if (c.lwp) {
    traced_window_lwp(c.cb, (void *)(uintptr_t)k);
    expected += CW_LWP_STOP_INSTRUCTIONS;
  } else {
    traced_window_perf(c.fd, (void *)(uintptr_t)k);
    expected += CW_PERF_STOP_INSTRUCTIONS;
  }
  const int64_t counted = counter_read(&c);
  if (!counter_exact(&c, counted, expected))
    say("ptrace_check: child counted %lld expected %lld\n", (long long)counted, (long long)expected);
  return counter_exact(&c, counted, expected) ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc < 3 || (strcmp(argv[2], "step") != 0 && strcmp(argv[2], "bp") != 0)) {
    say("usage: ptrace_check perf|lwp|none step|bp [K]\n");
    return 2;
  }
  const int lwp = strcmp(argv[1], "lwp") == 0, stepping = strcmp(argv[2], "step") == 0;
  const long k = window_count_arg(argc, argv, 3, 50, 1, 1000, "ptrace_check: K");
  if (k < 0) return 2;
  const pid_t pid = fork();
  if (pid == 0) _exit(child(argv[1], k));
  int exit_status = -1;
  if (tracer_next_stop(pid, &exit_status) != SIGSTOP) {
    say("ptrace_check: FAIL: the child did not stop\n");
    return 1;
  }
  const uint64_t body = (uint64_t)(uintptr_t)(lwp ? traced_window_lwp_body : traced_window_perf_body);
  const uint64_t end = (uint64_t)(uintptr_t)(lwp ? traced_window_lwp_end : traced_window_perf_end);
  const uint64_t dec = body + 3 + 1;  /* mov %r14,%rcx (3 bytes), nop */
  if (tracer_break_at(pid, stepping ? body : dec) != 0) {
    kill(pid, SIGKILL);
    return 1;
  }
  uint64_t n = 0, expected = 0;
  if (stepping) {
    expected = 1 + 3 * k;
    const long steps = tracer_step_through(pid, body, end, expected + 10, &exit_status);
    if (steps < 0) return 1;
    n = (uint64_t)steps;
    exit_status = tracer_finish(pid, exit_status);
  } else {
    expected = k;
    for (;;) {
      ptrace(PTRACE_CONT, pid, NULL, NULL);
      const int sig = tracer_next_stop(pid, &exit_status);
      if (sig < 0) break;
      if (sig != SIGTRAP) continue;
      const long dr6 = ptrace(PTRACE_PEEKUSER, pid, (void *)tracer_debugreg_offset(6), NULL);
      if (dr6 & 1) ++n;
    }
  }
  say("ptrace_check: %s %s %s %llu expected %llu, child's count %s\n", argv[1], argv[2],
      stepping ? "steps" : "hits", (unsigned long long)n, (unsigned long long)expected,
      exit_status == 0 ? "exact" : "wrong");
  return n == expected && exit_status == 0 ? 0 : 1;
}
