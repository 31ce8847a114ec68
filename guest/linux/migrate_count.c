/* migrate_count MODE [M]: a task that moves between CPUs while it is counted keeps an exact
 * count (DESIGN §4.7: "across context switches and vCPUs"). MODE: perf or lwp
 * (counted_window.h); needs two online CPUs (pmuvm run --vcpus 2). Pinned to CPU 0, the window
 * calls sched_setaffinity for the other CPU M times with raw syscalls; each call returns on that
 * CPU (the kernel migrates a task off a CPU its new mask excludes before the call returns). After
 * each call the task reads its CPU number with LSL of the per-CPU GDT descriptor (selector 0x7b,
 * how the vDSO's getcpu does it without RDPID) and shifts it into a history word:
 *     mov (%r14),%r12; mov 8(%r14),%r13; mov $M,%ebx; xor %ebp,%ebp              4
 *   M x { mov $203,%eax; xor %edi,%edi; mov $8,%esi; mov %r13,%rdx; syscall;
 *         xchg %r12,%r13; mov $0x7b,%eax; lsl %eax,%eax; and $0xfff,%eax;
 *         add %rbp,%rbp; or %rax,%rbp; dec %ebx; jnz }                              13 M
 *     mov %rbp,16(%r14)                                                              1
 * B = 5 + 13 M retired user instructions: perf counts B + 5, LWP stores B + 1 records
 * (counted_window.h). The history must read 1, 0, 1, ... (M bits, oldest highest): the
 * evidence that the task really moved each time; with LWP the records' CoreIds show both
 * vCPUs' APIC IDs.
 * Prints "migrate_count: MODE counted C expected E, moved N times" and exits 0 only when C == E
 * and the task moved M times. */
#define _GNU_SOURCE
#include <stdlib.h>

#include "guest/linux/counted_window.h"

COUNTED_WINDOW(migrate_window,
               "  mov (%r14), %r12\n  mov 8(%r14), %r13\n  mov 16(%r14), %ebx\n"
               "  xor %ebp, %ebp\n"
               "1: mov $203, %eax\n  xor %edi, %edi\n  mov $8, %esi\n  mov %r13, %rdx\n"
               "  syscall\n  xchg %r12, %r13\n  mov $0x7b, %eax\n  lsl %eax, %eax\n"
               "  and $0xfff, %eax\n  add %rbp, %rbp\n  or %rax, %rbp\n  dec %ebx\n  jnz 1b\n"
               "  mov %rbp, 16(%r14)\n")

int main(int argc, char **argv) {
  if (argc < 2) {
    say("usage: migrate_count perf|lwp|none [M]\n");
    return 2;
  }
  const long moves = window_count_arg(argc, argv, 2, 10, 1, 60, "migrate_count: M");
  if (moves < 0) return 2;
  struct counter c;
  if (counter_open(&c, argv[1]) != 0) return 1;
  const int core0 = apic_id_of(0), core1 = apic_id_of(1);
  if (core0 < 0 || core1 < 0 || pin_to_cpu(0) != 0) {
    say("migrate_count: FAIL: needs CPUs 0 and 1 online (pmuvm run --vcpus 2)\n");
    return 1;
  }
  static uint64_t cpu0_mask = 1, cpu1_mask = 2;
  /* arg: this CPU's mask, the other's, then M (the history of CPU numbers comes back). */
  uint64_t arg[3] = {(uint64_t)(uintptr_t)&cpu0_mask, (uint64_t)(uintptr_t)&cpu1_mask,
                     (uint64_t)moves};
  const int64_t body = 5 + 13 * (int64_t)moves;
  int64_t counted, expected;
  int bad = 0;
  if (c.lwp) {
    migrate_window_lwp(c.cb, arg);
    counted = counter_read(&c);
    expected = body + CW_LWP_STOP_INSTRUCTIONS;
    int seen0 = 0, seen1 = 0;
    for (int64_t i = 0; counted == expected && i < counted; ++i) {
      const int core = c.ring[i].core_id;
      seen0 |= core == core0;
      seen1 |= core == core1;
      if (core != core0 && core != core1) {
        say("migrate_count: FAIL: record %lld has CoreId %d\n", (long long)i, core);
        bad = 1;
      }
    }
    if (counted == expected && !(seen0 && seen1)) {
      say("migrate_count: FAIL: the records do not show both CPUs\n");
      bad = 1;
    }
  } else {
    migrate_window_perf(c.fd, arg);
    counted = counter_read(&c);
    expected = body + CW_PERF_STOP_INSTRUCTIONS;
  }
  /* Started on CPU 0: on CPU 1 after the 1st, 3rd, ... call. */
  uint64_t history = 0;
  for (long k = 0; k < moves; ++k) history = history << 1 | (uint64_t)((k + 1) % 2);
  const uint64_t moved = arg[2] == history ? (uint64_t)moves : 0;
  if (!moved)
    say("migrate_count: FAIL: CPU history %#llx, expected %#llx\n", (unsigned long long)arg[2],
        (unsigned long long)history);
  say("migrate_count: %s counted %lld expected %lld, moved %llu times\n", argv[1],
      (long long)counted, (long long)expected, (unsigned long long)moved);
  return counter_exact(&c, counted, expected) && !bad && moved == (uint64_t)moves ? 0 : 1;
}
