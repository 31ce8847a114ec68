/* dirty_pages LABEL FILL_MIB RATE [SECONDS]: a memory load for bench/migration_bench.py.
 *
 * 1. Calibrates the TSC against the kernel's scheduler tick (lwp_wait sleeps whole ticks; the
 *    task sleeps to a tick edge, then CALIBRATE_MS more).
 * 2. Makes the first FILL_MIB MiB (at most ARENA_MIB) of its .bss arena non-zero: one 8-byte
 *    word per 4 KiB page, which is all a VMM's zero-page check looks at before it sends the page.
 *    The arena is a plain static array: the VMM's loader gives a PT_LOAD segment's whole memsz
 *    physical pages and the kernel maps them all, so ARENA_MIB + ~6 MiB is the smallest --mem.
 *    Then prints "dirty_pages LABEL: ready, N pages non-zero in T ms (TSC at F kHz)".
 * 3. For SECONDS seconds of TSC time (0 or absent: for ever; end it with vm.shutdown), writes one
 *    word to RATE distinct pages per second, cycling through the filled pages in order (so a
 *    pre-copy round that lasts t seconds finds min(RATE * t, filled pages) pages dirty). It keeps
 *    to the rate by the TSC: it writes the pages that are due, then sleeps one tick; a backlog of
 *    more than a tenth of a second (the VM was paused) is dropped, not caught up in one burst.
 *    RATE 0: it only sleeps.
 * 4. Every second it reads every filled page back and checks that it holds exactly what was last
 *    written there (the fill pattern, or the stamp of its last write: stamps count up by one per
 *    write and pages are written in a fixed order, so the whole arena is known), then prints
 *    "dirty_pages LABEL: at S s, N pages dirtied in the last second, all P pages hold what was
 *    written". A migration or restore that lost a write (a dirty page never sent, a stale page)
 *    shows here: it prints "LOST WRITES: K of P pages ..." with the first such page, and exits 3.
 * Exit status 0, 2 for bad arguments, 3 for lost writes. */
#include "guest/lib/pmuvm.h"

#define ARENA_MIB 120
#define PAGE 4096u
#define WORDS_PER_PAGE (PAGE / 8u)
#define CALIBRATE_MS 500

/* volatile: every store and every read-back happens, in order, as written. */
static volatile uint64_t arena[(uint64_t)ARENA_MIB * 1024 * 1024 / 8] __attribute__((aligned(4096)));

static inline uint64_t rdtsc(void) {
  uint32_t lo, hi;
  __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
  return ((uint64_t)hi << 32) | lo;
}

static uint64_t fill_value(uint64_t page) { return 0x5a5a000000000000ull | page; }

/* Pages that do not hold what was written, when the last write (stamp `stamp`, 0: none yet) went
 * to the page before `next`; *first is set to the first of them. */
static uint64_t check_arena(uint64_t pages, uint64_t next, uint64_t stamp, uint64_t *first,
                            uint64_t *held, uint64_t *wanted) {
  uint64_t bad = 0;
  for (uint64_t p = 0; p < pages; ++p) {
    const uint64_t back = (next + pages - 1 - p) % pages; /* writes since page p's last one */
    const uint64_t want = back >= stamp ? fill_value(p) : stamp - back;
    const uint64_t have = arena[p * WORDS_PER_PAGE];
    if (have != want && bad++ == 0) *first = p, *held = have, *wanted = want;
  }
  return bad;
}

/* TSC ticks per second, measured over CALIBRATE_MS of scheduler ticks. */
static uint64_t tsc_hz(void) {
  sys_lwp_wait(1); /* wake on a tick edge */
  const uint64_t t0 = rdtsc();
  sys_lwp_wait(CALIBRATE_MS);
  const uint64_t t1 = rdtsc();
  return (t1 - t0) * 1000u / CALIBRATE_MS;
}

int main(int argc, char **argv) {
  long fill_mib = 0, rate = 0, seconds = 0;
  if (argc < 4 || argc > 5 || parse_long(argv[2], &fill_mib) != 0 || fill_mib < 1 ||
      fill_mib > ARENA_MIB || parse_long(argv[3], &rate) != 0 || rate < 0 ||
      rate > 100000000 || (argc == 5 && (parse_long(argv[4], &seconds) != 0 || seconds < 0))) {
    printf_("usage: dirty_pages LABEL FILL_MIB(1..%d) RATE(pages/s) [SECONDS]\n", ARENA_MIB);
    return 2;
  }
  const char *label = argv[1];
  const uint64_t hz = tsc_hz();
  if (hz == 0) {
    printf_("dirty_pages %s: the TSC does not advance (or the scheduler tick is off)\n", label);
    return 1;
  }

  const uint64_t pages = (uint64_t)fill_mib * 1024 * 1024 / PAGE;
  const uint64_t f0 = rdtsc();
  for (uint64_t p = 0; p < pages; ++p) arena[p * WORDS_PER_PAGE] = fill_value(p);
  const uint64_t f1 = rdtsc();
  printf_("dirty_pages %s: ready, %llu pages non-zero in %llu ms (TSC at %llu kHz)\n", label,
          (unsigned long long)pages, (unsigned long long)((f1 - f0) * 1000u / hz),
          (unsigned long long)(hz / 1000u));

  const uint64_t start = rdtsc();
  const uint64_t end_ticks = (uint64_t)seconds * hz;
  const uint64_t max_backlog = (uint64_t)rate / 10u + 1u;
  uint64_t done = 0, next = 0, stamp = 0, last_second = 0, at_last_second = 0;
  for (;;) {
    const uint64_t elapsed = rdtsc() - start;
    if (seconds != 0 && elapsed >= end_ticks) break;
    /* rate <= 1e8 and elapsed % hz < hz (a few 1e9): no overflow, no 128-bit division */
    const uint64_t due = elapsed / hz * (uint64_t)rate + elapsed % hz * (uint64_t)rate / hz;
    if (due > done + max_backlog) done = due - max_backlog; /* paused: drop the backlog */
    for (; done < due; ++done) {
      arena[next * WORDS_PER_PAGE] = ++stamp;
      if (++next == pages) next = 0;
    }
    const uint64_t second = elapsed / hz;
    if (second != last_second) {
      uint64_t first = 0, held = 0, wanted = 0;
      const uint64_t bad = check_arena(pages, next, stamp, &first, &held, &wanted);
      if (bad != 0) {
        printf_("dirty_pages %s: at %llu s: LOST WRITES: %llu of %llu pages do not hold what was "
                "written (page %llu holds %#llx, expected %#llx)\n", label,
                (unsigned long long)second, (unsigned long long)bad, (unsigned long long)pages,
                (unsigned long long)first, (unsigned long long)held, (unsigned long long)wanted);
        return 3;
      }
      printf_("dirty_pages %s: at %llu s, %llu pages dirtied in the last second, all %llu pages "
              "hold what was written\n", label, (unsigned long long)second,
              (unsigned long long)(stamp - at_last_second), (unsigned long long)pages);
      last_second = second;
      at_last_second = stamp;
    }
    sys_lwp_wait(rate != 0 ? 1 : 100);
  }
  printf_("dirty_pages %s: done, %llu pages dirtied in %ld s\n", label, (unsigned long long)stamp,
          seconds);
  return 0;
}
