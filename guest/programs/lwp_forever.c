/* lwp_forever: profiles itself with LWP until the VM ends - the "LWP-profiling guest" whose live
 * migration bench/migration_bench.py times. Two slots, and only these events: instructions
 * retired every 1000 and branches retired every 250 (no DCache slot: the VMM's cache model stays
 * out of it), a 64-record ring that it drains itself, no threshold interrupt. Prints
 * "lwp_forever: profiling" once LLWPCB ran, then "lwp_forever: N records" after every 4096
 * records. Exits 1 when LWP or either event is not there. */
#include "guest/lib/lwp.h"
#include "guest/lib/pmuvm.h"

#define RING_RECORDS 64

static struct lwpcb cb;
static struct lwp_record ring[RING_RECORDS] __attribute__((aligned(4096)));

/* Hands every record LWP stored back to it; returns how many there were. */
static uint32_t drain(void) {
  (void)slwpcb(); /* flushes BufferHeadOffset into the LWPCB */
  volatile struct lwpcb *v = &cb;
  const uint32_t head = v->head;
  uint32_t tail = v->tail, n = 0;
  for (; tail != head; ++n) {
    tail += LWP_RECORD_SIZE;
    if (tail >= sizeof ring) tail = 0;
  }
  v->tail = tail;
  return n;
}

int main(void) {
  struct lwp_info info;
  if (sys_lwp_info(&info) != 0 || !(info.eax & LWP_EN) || !(info.eax & LWP_IRE) ||
      !(info.eax & LWP_BRE) || ((info.ebx >> 16) & 0xFF) < 2) {
    printf_("lwp_forever: needs LWP with instructions and branches retired in two slots "
            "(CPUID 8000001C eax=%#x ebx=%#x)\n", info.eax, info.ebx);
    return 1;
  }
  lwpcb_instructions_and_branches(&cb, ring, sizeof ring, 1000, 250);
  llwpcb(&cb);
  print("lwp_forever: profiling\n");
  uint64_t records = 0, next_report = 4096, x = 1;
  for (;;) {
    for (int i = 0; i < 2000; ++i) x = (x & 1) ? x * 3 + 1 : x / 2 + i;
    records += drain();
    if (records >= next_report) {
      printf_("lwp_forever: %llu records\n", (unsigned long long)records);
      next_report += 4096;
    }
  }
}
