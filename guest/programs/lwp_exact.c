/* lwp_exact: an instruction sequence whose LWP records are known in advance (DESIGN.md §4.4).
 * One slot counts instructions retired with interval 10 (Random 0), a second counts branches
 * retired with interval 3. Right after LLWPCB runs, in one asm block:
 *   5 nops, mov $2 (yield) to eax, syscall, 3 x (nop; jmp to the next nop: a taken branch),
 *   20 nops, then SLWPCB.
 * Counting rules: the first counted instruction is the one after LLWPCB, LLWPCB/SLWPCB do not
 * retire, SYSCALL counts as one instruction and is not a branch, kernel code never counts. So the
 * instructions are numbered 1-5 nops, 6 mov, 7 syscall, 8 nop, 9 jmp, 10 nop, 11 jmp, 12 nop,
 * 13 jmp, 14-33 nops (instruction k >= 14 at start+21+k-14); records at instructions 10 (+15),
 * 20 (+27), 30 (+37) and at the 3rd branch (13: the jmp at +19 to +21), in that order. The program
 * prints every record as "rip=label+OFFSET" and checks the exact stream; exits 1 on a mismatch. */
#include "guest/lib/lwp.h"
#include "guest/lib/pmuvm.h"

static struct lwpcb cb;
static struct lwp_record ring[64] __attribute__((aligned(4096)));
extern const char lwp_exact_start[];

struct expected {
  unsigned id;
  unsigned offset;      /* instruction address - lwp_exact_start */
  unsigned target;      /* branch records: target - lwp_exact_start */
};

int main(void) {
  struct lwp_info info;
  if (sys_lwp_info(&info) != 0 || !(info.eax & LWP_IRE) || !(info.eax & LWP_BRE) ||
      ((info.ebx >> 16) & 0xFF) < 2) {
    printf_("lwp_exact: needs instructions and branches retired in 2 slots (eax=%#x ebx=%#x)\n",
            info.eax, info.ebx);
    return 1;
  }
  lwpcb_instructions_and_branches(&cb, ring, sizeof ring, 10, 3);

  uint64_t rax = (uint64_t)(uintptr_t)&cb;
  __asm__ volatile(
      ".byte 0x8f, 0xe9, 0xf8, 0x12, 0xc0\n\t" /* llwpcb rax */
      ".globl lwp_exact_start\n"
      "lwp_exact_start:\n\t"
      ".rept 5\n\tnop\n\t.endr\n\t"                  /* +0 .. +4 */
      "mov $2, %%eax\n\t"                            /* +5 (5 bytes) */
      "syscall\n\t"                                  /* +10 (2 bytes) */
      "nop\n\tjmp 1f\n1:\n\t"                        /* +12 nop, +13 jmp (2 bytes) -> +15 */
      "nop\n\tjmp 2f\n2:\n\t"                        /* +15 nop, +16 jmp -> +18 */
      "nop\n\tjmp 3f\n3:\n\t"                        /* +18 nop, +19 jmp -> +21 */
      ".rept 20\n\tnop\n\t.endr\n\t"                 /* +21 .. +40 */
      : "+a"(rax)
      :
      : "rcx", "r11", "memory");
  /* Flush with SLWPCB (no instruction in between can reach the next record: 40 or branch 6). */
  void *active = slwpcb();
  llwpcb(0);

  static const struct expected want[] = {
      {LWP_EVENT_INSTRUCTIONS, 15, 0}, /* instruction 10: the nop at +15 */
      {LWP_EVENT_BRANCHES, 19, 21},    /* branch 3: the jmp at +19 -> +21 */
      {LWP_EVENT_INSTRUCTIONS, 27, 0}, /* instruction 20: +21 + 6 */
      {LWP_EVENT_INSTRUCTIONS, 37, 0}, /* instruction 30: +21 + 16 */
  };
  const unsigned n = ((volatile struct lwpcb *)&cb)->head / LWP_RECORD_SIZE;
  int failed = active != &cb;
  if (failed) printf_("lwp_exact: FAIL: SLWPCB returned %p, not the LWPCB %p\n", active, (void *)&cb);
  for (unsigned i = 0; i < n; ++i) {
    const struct lwp_record *r = &ring[i];
    const long off = (long)(r->rip - (uint64_t)(uintptr_t)lwp_exact_start);
    const long to = (long)(r->address - (uint64_t)(uintptr_t)lwp_exact_start);
    if (r->event_id == LWP_EVENT_BRANCHES)
      printf_("lwp_exact: record %u: event %u rip=start+%ld target=start+%ld taken %u\n", i,
              r->event_id, off, to, (r->flags >> 15) & 1);
    else
      printf_("lwp_exact: record %u: event %u rip=start+%ld\n", i, r->event_id, off);
    if (i >= sizeof want / sizeof want[0] || r->event_id != want[i].id || off != (long)want[i].offset ||
        (r->event_id == LWP_EVENT_BRANCHES && to != (long)want[i].target)) {
      printf_("lwp_exact: FAIL: record %u is not the expected one\n", i);
      failed = 1;
    }
  }
  if (n != sizeof want / sizeof want[0]) {
    printf_("lwp_exact: FAIL: %u records, expected %u\n", n, (unsigned)(sizeof want / sizeof want[0]));
    failed = 1;
  }
  printf_("lwp_exact: %s\n", failed ? "FAILED" : "exact record stream");
  return failed;
}
