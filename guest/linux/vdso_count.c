/* vdso_count MODE: code of the vDSO counts like any other user code of the task (DESIGN §4.7).
 * MODE: perf or lwp (counted_window.h). The window calls glibc's time(), which a static glibc
 * runs in the vDSO (__vdso_time: one load of the coarse clock, no retry loop, so the same
 * instructions on every call):
 *     body   xor %edi,%edi; call time                                            2 + T
 * T is not known in advance, so it is measured the way a debugger would: a child (a fork, not
 * counted) runs the same body under this program's ptrace single-steps, from an execution
 * breakpoint on its first instruction to its end, N = 2 + T steps (the guest kernel's own
 * TF, no counter anywhere). Then this process runs the body in a counted window: perf must count
 * N + 5, LWP store N + 1 records, and with LWP some of them must lie in the vDSO's pages
 * (AT_SYSINFO_EHDR), the evidence that it ran there.
 * Prints "vdso_count: MODE counted C expected E" and exits 0 only when C == E (and, for LWP,
 * records lie in the vDSO). */
#define _GNU_SOURCE
#include <signal.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/ptrace.h>
#include <time.h>
#include <unistd.h>

#include "guest/linux/counted_window.h"
#include "guest/linux/tracer.h"

COUNTED_WINDOW(vdso_window, "  xor %edi, %edi\n  call time\n")

/* The body's instructions, single-stepped by a tracer in an uncounted child; -1 on failure. */
static long stepped_body(void) {
  const pid_t pid = fork();
  if (pid == 0) {
    struct counter none;
    if (counter_open(&none, "none") != 0 || ptrace(PTRACE_TRACEME, 0, NULL, NULL) != 0) _exit(1);
    raise(SIGSTOP);
    vdso_window_perf(none.fd, NULL);
    _exit(0);
  }
  int exit_status = -1;
  if (pid < 0 || tracer_next_stop(pid, &exit_status) != SIGSTOP) {
    say("vdso_count: FAIL: no traced child\n");
    return -1;
  }
  const uint64_t body = (uint64_t)(uintptr_t)vdso_window_perf_body;
  if (tracer_break_at(pid, body) != 0) {
    kill(pid, SIGKILL);
    return -1;
  }
  const long steps = tracer_step_through(pid, body, (uint64_t)(uintptr_t)vdso_window_perf_end,
                                         100000, &exit_status);
  if (steps < 0) return -1;
  if (tracer_finish(pid, exit_status) != 0) {
    say("vdso_count: FAIL: the traced child failed\n");
    return -1;
  }
  return steps;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    say("usage: vdso_count perf|lwp|none\n");
    return 2;
  }
  const uint64_t vdso = getauxval(AT_SYSINFO_EHDR);
  if (vdso == 0) {
    say("vdso_count: FAIL: no vDSO (AT_SYSINFO_EHDR)\n");
    return 1;
  }
  const long steps = stepped_body();
  if (steps < 0) return 1;
  struct counter c;
  if (counter_open(&c, argv[1]) != 0) return 1;
  int64_t counted, expected;
  int bad = 0;
  if (c.lwp) {
    vdso_window_lwp(c.cb, NULL);
    counted = counter_read(&c);
    expected = steps + CW_LWP_STOP_INSTRUCTIONS;
    int64_t in_vdso = 0;
    for (int64_t i = 0; i < counted; ++i) {
      const uint64_t rip = counter_record_rip(&c, (uint32_t)i);
      in_vdso += rip >= vdso && rip < vdso + 2 * 4096;
    }
    if (in_vdso == 0) {
      say("vdso_count: FAIL: no record lies in the vDSO at %#llx\n", (unsigned long long)vdso);
      bad = 1;
    }
  } else {
    vdso_window_perf(c.fd, NULL);
    counted = counter_read(&c);
    expected = steps + CW_PERF_STOP_INSTRUCTIONS;
  }
  say("vdso_count: %s counted %lld expected %lld\n", argv[1], (long long)counted,
      (long long)expected);
  return counter_exact(&c, counted, expected) && !bad ? 0 : 1;
}
