/* rep_count MODE: a REP string instruction retires once, however many iterations it runs
 * (DESIGN §4.7). MODE: perf or lwp (counted_window.h). The body clears 4096 bytes:
 *     lea buffer(%rip),%rdi; mov $4096,%ecx; xor %eax,%eax; rep stosb           4
 * so perf counts 4 + 5 = 9 and LWP stores 4 + 1 records, the fourth at the `rep stosb`, the last
 * at the window's stop (counted_window.h).
 * Prints "rep_count: MODE counted C expected E" and exits 0 only when C == E. */
#include <stdlib.h>

#include "guest/linux/counted_window.h"

static unsigned char buffer[4096] __attribute__((used));
COUNTED_WINDOW(rep_window,
               "  lea buffer(%rip), %rdi\n  mov $4096, %ecx\n  xor %eax, %eax\n  rep stosb\n")

int main(int argc, char **argv) {
  if (argc < 2) {
    say("usage: rep_count perf|lwp|none\n");
    return 2;
  }
  struct counter c;
  if (counter_open(&c, argv[1]) != 0) return 1;
  int64_t counted, expected;
  int bad = 0;
  if (c.lwp) {
    rep_window_lwp(c.cb, NULL);
    counted = counter_read(&c);
    expected = 4 + CW_LWP_STOP_INSTRUCTIONS;
    if (counted == expected &&
        counter_record_rip(&c, 3) != (uint64_t)(uintptr_t)rep_window_lwp_end - 2) {
      say("rep_count: FAIL: the last record is at %#llx, not at the rep stosb\n",
          (unsigned long long)counter_record_rip(&c, 3));
      bad = 1;
    }
  } else {
    rep_window_perf(c.fd, NULL);
    counted = counter_read(&c);
    expected = 4 + CW_PERF_STOP_INSTRUCTIONS;
  }
  for (size_t i = 0; i < sizeof buffer; ++i) bad |= buffer[i] != 0;
  say("rep_count: %s counted %lld expected %lld\n", argv[1], (long long)counted, (long long)expected);
  return counter_exact(&c, counted, expected) && !bad ? 0 : 1;
}
