/* lwp_demo [SCALE [RANDOM [timed|unprofiled]]]: the README's LWP demo. Sets up an LWPCB with the instructions-retired,
 * branches-retired and DCache-miss events (those CPUID 0x8000001C EAX enables, up to
 * LWPMaxEvents) and a ring buffer with a threshold, loads it with LLWPCB, then runs
 *   1. a hot arithmetic loop,
 *   2. a branchy phase (data-dependent branches from an LCG),
 *   3. a cache-unfriendly strided phase over a 4 MiB buffer (larger than the profiles' L2),
 * draining the ring buffer after each phase as a consumer that advances BufferTailOffset and
 * collecting threshold interrupts with lwp_wait. Prints what it saw per event, then SLWPCB and
 * LLWPCB 0. SCALE (default 1) multiplies the work: each user instruction is single-stepped by the
 * precise backend, so the default is kept to roughly 200k instructions. Exits 1 if LWP is not
 * enabled or no record arrived. RANDOM (default 0) goes into LWPCB.Random: that many low bits of
 * each reloaded counter are drawn from the seeded generator (pmuvm run --seed).
 * timed: also prints the TSC ticks the three compute phases took (the same instructions with
 * and without profiling: bench/stepper_bench's instructions-per-second ratio); unprofiled: the
 * same, without LLWPCB (nothing is stepped), and no records expected. */
#include "guest/lib/lwp.h"
#include "guest/lib/pmuvm.h"

#define RING_RECORDS 256
#define THRESHOLD_RECORDS 16
#define BIG_BYTES (4u << 20)
#define STRIDE (4096u + 64u)

static struct lwpcb cb;
static struct lwp_record ring[RING_RECORDS] __attribute__((aligned(4096)));
static uint8_t big[BIG_BYTES] __attribute__((aligned(4096)));

static uint64_t records[4];    /* by EventId 1..3; [0] counts anything else */
static uint64_t interrupts;
static struct lwp_record first[4];
static int have_first[4];

static void drain(void) {
  /* SLWPCB flushes LWP's internal state, so BufferHeadOffset in memory is current. */
  (void)slwpcb();
  volatile struct lwpcb *v = &cb;
  const uint32_t size = v->buffer_size & 0x0FFFFFFFu;
  const uint32_t head = v->head;
  uint32_t tail = v->tail;
  while (tail != head) {
    const struct lwp_record *r = &ring[tail / LWP_RECORD_SIZE];
    const unsigned id = r->event_id <= 3 ? r->event_id : 0;
    ++records[id];
    if (!have_first[id]) {
      first[id] = *r;
      have_first[id] = 1;
    }
    tail += LWP_RECORD_SIZE;
    if (tail >= size) tail = 0;
  }
  v->tail = tail; /* hand the space back to LWP */
}

static void report(const char *phase) {
  interrupts += (uint64_t)sys_lwp_wait(0);
  drain();
  printf_("lwp_demo: after %-8s records: instructions %llu, branches %llu, dcache %llu, other "
          "%llu; threshold interrupts %llu\n", phase, (unsigned long long)records[1],
          (unsigned long long)records[2], (unsigned long long)records[3],
          (unsigned long long)records[0], (unsigned long long)interrupts);
}

static uint64_t work_ticks; /* TSC ticks spent in the compute phases */

static inline uint64_t rdtsc(void) {
  uint32_t lo, hi;
  __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
  return ((uint64_t)hi << 32) | lo;
}

static uint64_t hot_loop(uint64_t n) {
  uint64_t x = 1;
  for (uint64_t i = 0; i < n; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
  return x;
}

static uint64_t branchy(uint64_t n) {
  uint64_t x = 88172645463325252ull, a = 0, b = 0;
  for (uint64_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    if (x & 0x100) ++a;
    else ++b;
    if (((x >> 20) & 3) == 0) a += x & 7;
  }
  return a * 31 + b;
}

static uint64_t strided(unsigned passes) {
  uint64_t sum = 0;
  volatile const uint8_t *p = big;
  for (unsigned pass = 0; pass < passes; ++pass)
    for (uint32_t off = pass * 64u; off < BIG_BYTES; off += STRIDE) sum += p[off];
  return sum;
}

int main(int argc, char **argv) {
  long scale = 1, random = 0;
  const int timed = argc > 3 && (!strcmp(argv[3], "timed") || !strcmp(argv[3], "unprofiled"));
  const int profiled = !(argc > 3 && !strcmp(argv[3], "unprofiled"));
  if ((argc > 1 && (parse_long(argv[1], &scale) != 0 || scale < 1 || scale > 1000)) ||
      (argc > 2 && (parse_long(argv[2], &random) != 0 || random < 0 || random > 15)) ||
      (argc > 3 && !timed)) {
    print("usage: lwp_demo [SCALE 1..1000 [RANDOM 0..15 [timed|unprofiled]]]\n");
    return 2;
  }
  if (!profiled) {
    const uint64_t t0 = rdtsc();
    uint64_t sink = hot_loop(20000u * (uint64_t)scale);
    sink += branchy(5000u * (uint64_t)scale);
    sink += strided(4u * (unsigned)scale);
    const uint64_t t1 = rdtsc();
    printf_("lwp_demo: unprofiled (no LLWPCB); compute phases took %llu TSC ticks (checksum %#llx)\n",
            (unsigned long long)(t1 - t0), (unsigned long long)(sink & 0xFFFF));
    return 0;
  }
  struct lwp_info info;
  if (sys_lwp_info(&info) != 0 || !(info.eax & LWP_EN)) {
    printf_("lwp_demo: LWP is not enabled (CPUID 8000001C eax=%#x); use an LWP CPU profile\n",
            info.eax);
    return 1;
  }
  const unsigned max_events = (info.ebx >> 16) & 0xFF;
  printf_("lwp_demo: CPUID 8000001C eax=%#x ebx=%#x ecx=%#x edx=%#x (%u event slot%s)\n",
          info.eax, info.ebx, info.ecx, info.edx, max_events, max_events == 1 ? "" : "s");

  memset(&cb, 0, sizeof cb);
  cb.buffer_size = sizeof ring | ((uint32_t)random << 28); /* Random: low counter bits drawn */
  cb.buffer_base = (uint64_t)(uintptr_t)ring;
  cb.threshold = (info.eax & LWP_INT) ? THRESHOLD_RECORDS * LWP_RECORD_SIZE : 0;
  static const struct {
    uint32_t enable_bit;
    unsigned id;
    uint32_t interval;
    const char *name;
  } wanted[] = {
      {LWP_IRE, LWP_EVENT_INSTRUCTIONS, 4096, "instructions retired"},
      {LWP_BRE, LWP_EVENT_BRANCHES, 1024, "branches retired"},
      {LWP_DME, LWP_EVENT_DCACHE_MISSES, 64, "DCache misses"},
  };
  unsigned slot = 0;
  for (unsigned i = 0; i < 3 && slot < max_events; ++i) {
    if (!(info.eax & wanted[i].enable_bit)) continue;
    cb.events[slot++].interval_id = lwp_event(wanted[i].id, wanted[i].interval);
    printf_("lwp_demo: slot %u: %s every %u\n", slot - 1, wanted[i].name, wanted[i].interval);
  }
  if (slot == 0) {
    print("lwp_demo: no event is enabled\n");
    return 1;
  }

  llwpcb(&cb);
  printf_("lwp_demo: LLWPCB %p -> Flags %#x, ring of %u records, threshold %u bytes\n",
          (void *)&cb, *(volatile uint32_t *)&cb.flags, RING_RECORDS, cb.threshold);

  uint64_t t0 = rdtsc();
  uint64_t sink = hot_loop(20000u * (uint64_t)scale);
  work_ticks += rdtsc() - t0;
  report("hot");
  t0 = rdtsc();
  sink += branchy(5000u * (uint64_t)scale);
  work_ticks += rdtsc() - t0;
  report("branchy");
  t0 = rdtsc();
  sink += strided(4u * (unsigned)scale);
  work_ticks += rdtsc() - t0;
  interrupts += (uint64_t)sys_lwp_wait(20); /* give a late threshold interrupt a chance */
  report("strided");

  void *active = slwpcb();
  const uint64_t missed = ((volatile struct lwpcb *)&cb)->missed;
  llwpcb(0);
  void *after = slwpcb();

  printf_("lwp_demo: summary: instructions-retired records %llu, branches-retired records %llu, "
          "DCache-miss records %llu, other %llu, missed events %llu, threshold interrupts %llu\n",
          (unsigned long long)records[1], (unsigned long long)records[2],
          (unsigned long long)records[3], (unsigned long long)records[0],
          (unsigned long long)missed, (unsigned long long)interrupts);
  if (have_first[1])
    printf_("lwp_demo: first instructions record: rip %#llx core %u\n",
            (unsigned long long)first[1].rip, first[1].core_id);
  if (have_first[2])
    printf_("lwp_demo: first branch record: rip %#llx -> %#llx, taken %u, predicted %u\n",
            (unsigned long long)first[2].rip, (unsigned long long)first[2].address,
            (first[2].flags >> 15) & 1, (first[2].flags >> 14) & 1);
  if (have_first[3])
    printf_("lwp_demo: first DCache record: rip %#llx, data %#llx, latency %u, source %u\n",
            (unsigned long long)first[3].rip, (unsigned long long)first[3].address,
            first[3].data, (first[3].flags >> 13) & 7);
  printf_("lwp_demo: SLWPCB before disabling %p, after LLWPCB 0 %p (checksum %#llx)\n", active,
          after, (unsigned long long)(sink & 0xFFFF));
  if (timed)
    printf_("lwp_demo: profiled; compute phases took %llu TSC ticks\n",
            (unsigned long long)work_ticks);
  const uint64_t total = records[0] + records[1] + records[2] + records[3];
  if (total == 0) {
    print("lwp_demo: no LWP record arrived (is a counting backend stepping this task?)\n");
    return 1;
  }
  return 0;
}
