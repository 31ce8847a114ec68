/* lwp_dcache [FILTERS [INTERVAL]]: DCache-miss records (EventId 3) known in advance, field by
 * field (DESIGN.md §4.2, proposal §4.3 and Figure 4). FILTERS (hex, default 0) goes into
 * LWPCB.Filters (MinLatency [7:0] x16 cycles, CLF 24, NBC 25, RDC 26, RAM 27, OTH 28), INTERVAL
 * (default 1) into the one DCache slot (Random 0).
 *
 * lwp_dcache_run (asm below) loads the LWPCB and runs a fixed list of loads and stores over
 * `area` (page aligned; every page it touches is written before LLWPCB, which is not stepped, so
 * no page fault lands in the sequence), then SLWPCB and LLWPCB 0. The precise backend's cache
 * model (pmu/cache/cache_model.h) starts cold for this task: only stepped CPL-3 instructions feed
 * it, and nothing of this program is stepped before LLWPCB. Run it as the only profiling task on
 * its vCPU: the model is one per vCPU and tagged by linear address, and every program is linked
 * at the same addresses, so another profiled task there changes what hits (two copies on one
 * vCPU both FAIL). Its rules: set-associative, true LRU,
 * indexed by linear address, a miss fills every level below the one that hit (L3 only from DRAM),
 * stores allocate but are never reported, a load spanning two lines reports the lowest address
 * that missed with the farther level's latency. The amd-lwp profile: 64-byte lines, L1D 16 KiB
 * 4-way (64 sets: lines 4 KiB apart share a set), L2 2 MiB 16-way and L3 8 MiB 64-way (2048 sets:
 * lines 128 KiB apart share a set), latencies L2 20, L3 65, DRAM 250 cycles. Records carry the
 * latency rounded down to 16 (16, 64, 240; n = 10 caps at 1008) and the source code of Figure 4
 * (L2 has none: 0, L3 "local L3" 1, DRAM 3), data address valid (bit 28).
 * A_k = area + k * 0x20000 (k = 0..16) all share L1 set 0 and L2/L3 set 0:
 *   load  0  A0          DRAM (cold)                          -> miss 1: 240, src 3, A0
 *   load  1  A0 + 8      L1 hit
 *   loads 2..17  A1..A16 DRAM each                            -> misses 2..17: 240, src 3
 *        (the 17th line in the 16-way L2 set evicts A0 from L2; L1 keeps A13..A16)
 *   load 18  A0          L3 hit (inclusive fill from DRAM)    -> miss 18: 64, src 1, A0
 *        (fills L2, evicting A1 (LRU); L1 now A14, A15, A16, A0)
 *   load 19  A12         L1 miss, L2 hit                      -> miss 19: 16, src 0, A12
 *   load 20  A1          L2 miss (evicted above), L3 hit      -> miss 20: 64, src 1, A1
 *   store    area+0x2080 write-allocates, no record
 *   load 21  area+0x2080 L1 hit (the store brought it in)
 *   load 22  area+0x107c 8 bytes over lines 0x1040 and 0x1080, both cold: one event (§4.3),
 *                        the lowest address that missed   -> miss 21: 240, src 3, area+0x107c
 *   store    area+0x10c0 brings line 0x10c0 in
 *   load 23  area+0x10fc 8 bytes over 0x10c0 (L1 hit) and 0x1100 (cold): the address is the
 *                        second line's first byte          -> miss 22: 240, src 3, area+0x1100
 * Filters (pmu/lwp/lwp_unit.h "DCache eligibility"): MinLatency m keeps misses whose reported
 * latency is >= 16 m; CLF keeps only sources whose bit is set (NBC = L3, RAM = DRAM; RDC and OTH
 * name sources this model never produces; L2 is never eligible under CLF); both filters must pass.
 * Every INTERVAL-th eligible miss is recorded. The program derives the expected records from the
 * table above, prints each record it finds and PASS, or FAIL with the difference; exits 1 on a
 * mismatch. */
#include "guest/lib/lwp.h"
#include "guest/lib/pmuvm.h"

#define AREA_BYTES (17u * 0x20000u)
#define RING_RECORDS 32

static struct lwpcb cb;
static struct lwp_record ring[RING_RECORDS] __attribute__((aligned(4096)));
static uint8_t area[AREA_BYTES] __attribute__((aligned(4096)));

/* The addresses of the 24 load instructions, in order (filled by the assembler). */
extern const uint64_t lwp_dcache_loads[], lwp_dcache_loads_end[];
/* void *lwp_dcache_run(struct lwpcb *cb, uint8_t *area): returns what SLWPCB returned. */
void *lwp_dcache_run(struct lwpcb *cb, uint8_t *area);

#define LOAD(disp)                                                        \
  "1: mov " #disp "(%rsi), %rdx\n"                                        \
  ".pushsection .rodata.lwp_dcache_loads, \"a\"\n .quad 1b\n .popsection\n"

__asm__(
    ".pushsection .rodata.lwp_dcache_loads, \"a\"\n"
    ".balign 8\n"
    ".globl lwp_dcache_loads\n"
    "lwp_dcache_loads:\n"
    ".popsection\n"
    ".text\n"
    ".globl lwp_dcache_run\n"
    "lwp_dcache_run:\n"
    "  xor %ecx, %ecx\n"
    "  .byte 0x8f, 0xe9, 0xf8, 0x12, 0xc7\n" /* llwpcb rdi */
    LOAD(0x00000) LOAD(0x00008)
    LOAD(0x20000) LOAD(0x40000) LOAD(0x60000) LOAD(0x80000)
    LOAD(0xa0000) LOAD(0xc0000) LOAD(0xe0000) LOAD(0x100000)
    LOAD(0x120000) LOAD(0x140000) LOAD(0x160000) LOAD(0x180000)
    LOAD(0x1a0000) LOAD(0x1c0000) LOAD(0x1e0000) LOAD(0x200000)
    LOAD(0x00000) LOAD(0x180000) LOAD(0x20000)
    "  mov %rdx, 0x2080(%rsi)\n"
    LOAD(0x2080) LOAD(0x107c)
    "  mov %rdx, 0x10c0(%rsi)\n"
    LOAD(0x10fc)
    "  .byte 0x8f, 0xe9, 0xf8, 0x12, 0xc8\n" /* slwpcb rax */
    "  .byte 0x8f, 0xe9, 0xf8, 0x12, 0xc1\n" /* llwpcb rcx (0: LWP off, nothing after counts) */
    "  ret\n"
    ".pushsection .rodata.lwp_dcache_loads, \"a\"\n"
    ".globl lwp_dcache_loads_end\n"
    "lwp_dcache_loads_end:\n"
    ".popsection\n");

enum { L2 = 0, L3 = 1, DRAM = 3 };
struct miss {
  unsigned load;      /* index into lwp_dcache_loads */
  uint32_t data;      /* data address - area */
  uint32_t latency;   /* reported (rounded) */
  unsigned source;    /* Figure 4 code */
};
/* The 22 misses of the header comment, in order. */
static const struct miss misses[] = {
    {0, 0x0, 240, DRAM},        {2, 0x20000, 240, DRAM},   {3, 0x40000, 240, DRAM},
    {4, 0x60000, 240, DRAM},    {5, 0x80000, 240, DRAM},   {6, 0xa0000, 240, DRAM},
    {7, 0xc0000, 240, DRAM},    {8, 0xe0000, 240, DRAM},   {9, 0x100000, 240, DRAM},
    {10, 0x120000, 240, DRAM},  {11, 0x140000, 240, DRAM}, {12, 0x160000, 240, DRAM},
    {13, 0x180000, 240, DRAM},  {14, 0x1a0000, 240, DRAM}, {15, 0x1c0000, 240, DRAM},
    {16, 0x1e0000, 240, DRAM},  {17, 0x200000, 240, DRAM}, {18, 0x0, 64, L3},
    {19, 0x180000, 16, L2},     {20, 0x20000, 64, L3},     {22, 0x107c, 240, DRAM},
    {23, 0x1100, 240, DRAM},
};
#define MISSES (sizeof misses / sizeof misses[0])

static int eligible(const struct miss *m, uint32_t filters) {
  const uint32_t min_latency = (filters & 0xFF) * 16;
  if (min_latency && m->latency < (min_latency < 1008 ? min_latency : 1008)) return 0;
  if (filters & (1u << 24)) { /* CLF */
    const uint32_t bit = m->source == L3 ? 25 : m->source == DRAM ? 27 : 0;
    if (!bit || !(filters & (1u << bit))) return 0;
  }
  return 1;
}

/* A hex number with an optional 0x: 0 and *out, or -1. */
static int parse_hex(const char *s, long *out) {
  if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s += 2;
  if (!*s) return -1;
  long v = 0;
  for (; *s; ++s) {
    const int d = *s >= '0' && *s <= '9' ? *s - '0' : *s >= 'a' && *s <= 'f' ? *s - 'a' + 10
                : *s >= 'A' && *s <= 'F' ? *s - 'A' + 10 : -1;
    if (d < 0 || v > 0xFFFFFFFL) return -1;
    v = v * 16 + d;
  }
  *out = v;
  return 0;
}

static int load_index(uint64_t rip) {
  for (const uint64_t *p = lwp_dcache_loads; p < lwp_dcache_loads_end; ++p)
    if (*p == rip) return (int)(p - lwp_dcache_loads);
  return -1;
}

int main(int argc, char **argv) {
  long filters = 0, interval = 1;
  if (argc > 1 && (parse_hex(argv[1], &filters) != 0 || filters < 0 || filters > 0xFFFFFFFFL)) {
    printf_("lwp_dcache: FAIL: FILTERS must be a 32-bit hex number, got '%s'\n", argv[1]);
    return 2;
  }
  if (argc > 2 && (parse_long(argv[2], &interval) != 0 || interval < 1 || interval > 1000)) {
    printf_("lwp_dcache: FAIL: INTERVAL must be 1..1000, got '%s'\n", argv[2]);
    return 2;
  }
  struct lwp_info info;
  if (sys_lwp_info(&info) != 0 || !(info.eax & LWP_DME) || !(info.ecx & (1u << 5))) {
    printf_("lwp_dcache: FAIL: needs DCache misses with data address (eax=%#x ecx=%#x)\n",
            info.eax, info.ecx);
    return 1;
  }
  const unsigned n_loads = (unsigned)(lwp_dcache_loads_end - lwp_dcache_loads);
  if (n_loads != 24) {
    printf_("lwp_dcache: FAIL: %u load labels, expected 24\n", n_loads);
    return 1;
  }
  /* Make every page the sequence and LWP touch present before LLWPCB (nothing here is stepped). */
  memset(&cb, 0, sizeof cb);
  memset(ring, 0, sizeof ring);
  for (uint32_t off = 0; off < AREA_BYTES; off += 4096) area[off] = 1;
  cb.buffer_size = sizeof ring;
  cb.buffer_base = (uint64_t)(uintptr_t)ring;
  cb.filters = (uint32_t)filters;
  cb.events[0].interval_id = lwp_event(LWP_EVENT_DCACHE_MISSES, (uint32_t)interval);
  printf_("lwp_dcache: filters %#lx interval %ld ring=%p area=%p\n", filters, interval,
          (void *)ring, (void *)area);

  void *active = lwp_dcache_run(&cb, area);

  const struct miss *want[MISSES];
  unsigned n_want = 0, seen = 0;
  for (unsigned i = 0; i < MISSES; ++i)
    if (eligible(&misses[i], (uint32_t)filters) && ++seen % (unsigned)interval == 0)
      want[n_want++] = &misses[i];
  volatile struct lwpcb *v = &cb;
  const unsigned n = v->head / LWP_RECORD_SIZE;
  int failed = 0;
  if (active != &cb) {
    printf_("lwp_dcache: FAIL: SLWPCB returned %p, not the LWPCB %p\n", active, (void *)&cb);
    failed = 1;
  }
  if (v->flags != (LWP_EN | LWP_DME) || v->missed != 0 || v->tail != 0) {
    printf_("lwp_dcache: FAIL: LWPCB flags %#x missed %llu tail %u, expected %#x 0 0\n", v->flags,
            (unsigned long long)v->missed, v->tail, LWP_EN | LWP_DME);
    failed = 1;
  }
  for (unsigned i = 0; i < n; ++i) {
    const struct lwp_record *r = &ring[i];
    const int load = load_index(r->rip);
    const unsigned source = r->flags >> 13, valid = (r->flags >> 12) & 1;
    printf_("lwp_dcache: record %u: event %u core %u load %d rip=%#llx data=area+%#llx latency %u "
            "source %u valid %u\n", i, r->event_id, r->core_id, load, (unsigned long long)r->rip,
            (unsigned long long)(r->address - (uint64_t)(uintptr_t)area), r->data, source, valid);
    const struct miss *w = i < n_want ? want[i] : 0;
    if (!w || r->event_id != LWP_EVENT_DCACHE_MISSES || r->core_id != 0 || load != (int)w->load ||
        r->address != (uint64_t)(uintptr_t)area + w->data || r->data != w->latency ||
        source != w->source || !valid || (r->flags & 0x0FFF) != 0 || r->reserved != 0) {
      if (w)
        printf_("lwp_dcache: FAIL: record %u should be: event 3 core 0 load %u data=area+%#x "
                "latency %u source %u valid 1\n", i, w->load, w->data, w->latency, w->source);
      else
        printf_("lwp_dcache: FAIL: record %u is one too many\n", i);
      failed = 1;
    }
  }
  if (n != n_want) {
    printf_("lwp_dcache: FAIL: %u records, expected %u\n", n, n_want);
    failed = 1;
  }
  printf_("lwp_dcache: %s: %u DCache records\n", failed ? "FAIL" : "PASS", n);
  return failed;
}
