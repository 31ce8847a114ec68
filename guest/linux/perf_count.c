/* perf_count [N]: Linux's perf counts exactly the user instructions of a known window.
 * perf_event_open(PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, exclude_kernel, exclude_hv,
 * disabled; this task, any CPU). Under the intel-netburst profile Linux's P4 driver maps it to
 * instr_retired with NBOGUSNTAG|BOGUSNTAG at T0_USR; the virtual PMU counts every retired
 * instruction for NBOGUSNTAG and none for BOGUSNTAG (pmu/netburst/README.md), so the count is
 * the window's instruction count, derived in perf_loop.h: 8N + 4 (N = 1000: 8004; N = 1: 12).
 * Prints "perf_count: instructions C expected E" and exits 0 only when C == E. */
#include <linux/perf_event.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "guest/linux/perf_loop.h"

int main(int argc, char **argv) {
  const long n = argc > 1 ? atol(argv[1]) : 1000;
  if (n < 1 || n > 100000000) {
    say("usage: perf_count [N >= 1]\n");
    return 2;
  }
  const int fd = perf_open_instructions(0, 0);
  if (fd < 0) {
    say("perf_count: FAIL: perf_event_open: %m\n");
    return 1;
  }
  long enabled = -1;
  const long disabled = perf_loop(fd, (uint64_t)n, &enabled);
  uint64_t count = 0;
  const ssize_t r = read(fd, &count, sizeof count);
  const uint64_t expected = perf_loop_count((uint64_t)n);
  say("perf_count: instructions %llu expected %llu\n", (unsigned long long)count,
      (unsigned long long)expected);
  if (enabled != 0 || disabled != 0 || r != (ssize_t)sizeof count) {
    say("perf_count: FAIL: ioctl ENABLE %ld, DISABLE %ld, read %zd\n", enabled, disabled, r);
    return 1;
  }
  return count == expected ? 0 : 1;
}
