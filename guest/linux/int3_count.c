/* int3_count MODE [K]: int3 works while counting is on and retires as one instruction (it is a
 * trap: SIGTRAP's handler returns after it). MODE: perf or lwp (counted_window.h).
 *     body     mov %r14,%rbx; 1: int3; dec %rbx; jnz 1b                         1 + 3K
 *     handler  incq traps(%rip); ret                                             2 per trap
 *     restorer mov $15,%rax; syscall                                             2 per trap
 * K SIGTRAPs and B = 1 + 7K counted instructions (perf: B + 5, LWP: B + 1).
 * Prints "int3_count: MODE traps T expected K, counted C expected E"; exits 0 only when both
 * match. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "guest/linux/counted_window.h"

uint64_t traps;
void on_trap(int);
__asm__(".text\n"
        ".globl on_trap\n"
        "on_trap:\n"
        "  incq traps(%rip)\n"
        "  ret\n");

COUNTED_WINDOW(int3_window, "  mov %r14, %rbx\n1: int3\n  dec %rbx\n  jnz 1b\n")

int main(int argc, char **argv) {
  if (argc < 2) {
    say("usage: int3_count perf|lwp|none [K]\n");
    return 2;
  }
  const long k = window_count_arg(argc, argv, 2, 10, 1, 500, "int3_count: K");
  if (k < 0) return 2;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_trap;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGTRAP, &sa, NULL) != 0) {
    say("int3_count: FAIL: sigaction\n");
    return 1;
  }
  struct counter c;
  if (counter_open(&c, argv[1]) != 0) return 1;
  int64_t expected = 1 + 7 * (int64_t)k;
  if (c.lwp) {
    int3_window_lwp(c.cb, (void *)(uintptr_t)k);
    expected += CW_LWP_STOP_INSTRUCTIONS;
  } else {
    int3_window_perf(c.fd, (void *)(uintptr_t)k);
    expected += CW_PERF_STOP_INSTRUCTIONS;
  }
  const int64_t counted = counter_read(&c);
  say("int3_count: %s traps %llu expected %llu, counted %lld expected %lld\n", argv[1],
      (unsigned long long)traps, (unsigned long long)k, (long long)counted, (long long)expected);
  return traps == (uint64_t)k && counter_exact(&c, counted, expected) ? 0 : 1;
}
