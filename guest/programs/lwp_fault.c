/* lwp_fault: LWP ring buffers in demand-zero memory (DESIGN.md §4.1: a record store that finds its
 * buffer page not present or read-only raises a #PF *trap*; the kernel maps the page and the next
 * occurrence of the event stores the record).
 *
 * Two runs, each with one slot counting instructions retired, interval 10 (Random 0), and the
 * same code right after LLWPCB: 35 nops, then SLWPCB. Counting rules (DESIGN.md §4.4): the first
 * counted instruction is the one after LLWPCB and LLWPCB/SLWPCB do not retire, so instruction k is
 * the nop at start + k - 1.
 *   run 1: the buffer is page 0 of the demand-zero region (pmuvm_abi.h), never touched: not
 *          present. Instruction 10 takes the counter to zero; its store finds the page absent and
 *          traps (#PF, CR2 = the page, error 0x6 = U|W); the kernel maps a zeroed page writable and
 *          the task resumes at instruction 11, whose occurrence stores the waiting record. The
 *          counter reloads: records at instructions 11, 21, 31 = start+10, +20, +30, at buffer
 *          offsets 0, 32, 64 (the trap left the head at 0).
 *   run 2: the buffer is page 1 of the region, which the program reads first: the kernel maps its
 *          shared zero page there read-only (error 0x4). Instruction 10's store finds the page
 *          present but read-only and traps with error 0x7 (P|W|U); the kernel copies on write;
 *          records again at start+10, +20, +30.
 * The kernel prints one line per demand-zero fault (the end-to-end test checks them: 0x6 for
 * run 1; 0x4 then 0x7 for run 2). The program prints every record and checks the exact stream,
 * that MissedEvents is 0, and that the buffers read back what the records say; exits 1 on a
 * mismatch. */
#include "guest/lib/lwp.h"
#include "guest/lib/pmuvm.h"

static struct lwpcb cb;
extern const char lwp_fault_start1[], lwp_fault_start2[];

#define RECORDS 3

/* LLWPCB(cb), the 35 nops at `label`, SLWPCB; LWP off afterwards. Returns what SLWPCB returned. */
#define PROFILED_NOPS(label)                                                   \
  ({                                                                           \
    uint64_t rax = (uint64_t)(uintptr_t)&cb;                                   \
    __asm__ volatile(".byte 0x8f, 0xe9, 0xf8, 0x12, 0xc0\n\t" /* llwpcb rax */ \
                     ".globl " label "\n" label ":\n\t"                        \
                     ".rept 35\n\tnop\n\t.endr\n\t"                            \
                     : "+a"(rax)                                               \
                     :                                                         \
                     : "memory");                                              \
    void *active = slwpcb64();                                                 \
    llwpcb(0);                                                                 \
    active;                                                                    \
  })

static int check(int run, const char *start, void *active, const struct lwp_record *ring) {
  static const unsigned want[RECORDS] = {10, 20, 30}; /* instructions 11, 21, 31 */
  const volatile struct lwpcb *v = &cb;
  const unsigned n = v->head / LWP_RECORD_SIZE;
  int failed = 0;
  if (active != &cb) {
    printf_("lwp_fault: run %d: FAIL: SLWPCB returned %p, not the LWPCB %p\n", run, active, (void *)&cb);
    failed = 1;
  }
  for (unsigned i = 0; i < n; ++i) {
    const long off = (long)(ring[i].rip - (uint64_t)(uintptr_t)start);
    printf_("lwp_fault: run %d: record %u: event %u rip=start+%ld\n", run, i, ring[i].event_id, off);
    if (i >= RECORDS || ring[i].event_id != LWP_EVENT_INSTRUCTIONS || off != (long)want[i]) {
      printf_("lwp_fault: run %d: FAIL: record %u is not the expected one\n", run, i);
      failed = 1;
    }
  }
  if (n != RECORDS) {
    printf_("lwp_fault: run %d: FAIL: %u records, expected %u\n", run, n, RECORDS);
    failed = 1;
  }
  if (v->missed != 0) {
    printf_("lwp_fault: run %d: FAIL: MissedEvents %u\n", run, (unsigned)v->missed);
    failed = 1;
  }
  return failed;
}

static void setup(uint64_t buffer) {
  memset(&cb, 0, sizeof cb);
  cb.buffer_size = 64 * LWP_RECORD_SIZE;
  cb.buffer_base = buffer;
  cb.events[0].interval_id = lwp_event(LWP_EVENT_INSTRUCTIONS, 10);
}

int main(void) {
  struct lwp_info info;
  if (sys_lwp_info(&info) != 0 || !(info.eax & LWP_IRE)) {
    printf_("lwp_fault: needs instructions retired (eax=%#x)\n", info.eax);
    return 1;
  }
  const struct lwp_record *ring1 = (const struct lwp_record *)(uintptr_t)PMUVM_DEMAND_ZERO_VA;
  const struct lwp_record *ring2 = (const struct lwp_record *)(uintptr_t)(PMUVM_DEMAND_ZERO_VA + 4096);

  setup((uint64_t)(uintptr_t)ring1); /* run 1: page not present */
  void *active = PROFILED_NOPS("lwp_fault_start1");
  int failed = check(1, lwp_fault_start1, active, ring1);

  /* run 2: a read maps the zero page read-only; LWP's store must copy it on write */
  const uint64_t before = *(const volatile uint64_t *)ring2;
  setup((uint64_t)(uintptr_t)ring2);
  active = PROFILED_NOPS("lwp_fault_start2");
  failed |= check(2, lwp_fault_start2, active, ring2);
  if (before != 0) {
    printf_("lwp_fault: FAIL: the demand-zero page read %#llx, not 0\n", (unsigned long long)before);
    failed = 1;
  }
  printf_("lwp_fault: %s\n", failed ? "FAILED" : "exact record streams");
  return failed;
}
