/* lwp_selfcheck: LWP self-profiling of a known instruction sequence under Linux, checked record by
 * record (the model: guest/programs/lwp_exact.c). Slot 0 counts instructions retired with
 * interval 10, slot 1 branches retired with interval 2 (Random 0). The LWPCB and the 64-record
 * ring are static, page-aligned and written before LLWPCB (present, user-writable). The task is
 * pinned to CPU 0, so every record's CoreId is CPU 0's APIC ID (/proc/cpuinfo).
 *
 * lwp_selfcheck_run(cb, zero) runs, in one asm block, `llwpcb rdi` and then (k = instruction
 * number after LLWPCB; LLWPCB/SLWPCB do not retire, SYSCALL is one instruction, not a branch):
 *    1-5   nop
 *    6     mov $24, %eax        (sched_yield)
 *    7     syscall              (the kernel runs, and may switch tasks: nothing of it counts)
 *    8,9   nop; jmp 1f; 1:      branch 1, taken
 *   10,11  nop; jmp             branch 2, taken       -> branch record at 11 (to 12)
 *   12,13  nop; jmp             branch 3, taken
 *   14,15  xor %eax,%eax; jnz   branch 4, not taken   -> branch record at 15 (to 16, not taken)
 *   16,17  xor; jnz             branch 5, not taken
 *   18-37  nop
 * then `slwpcb rax` (flush; returns the LWPCB) and `llwpcb rdx` (rdx = 0: off).
 * Instruction records at 10, 20, 30; branch records at branches 2 and 4 (k = 11, 15); no two on
 * one instruction. Expected stream, in order: insn@10, branch@11 (taken, to 12),
 * branch@15 (not taken, to 16), insn@20, insn@30: 5 records, BufferHeadOffset 160, no missed
 * events, Flags EN | bit 1 | bit 2 (instructions and branches active; no INT: threshold 0).
 * The same expectation is computed from the labels by lwp_expected() (lwp_linux.c), and the run
 * is done twice in this process: both ring images must be identical byte for byte.
 * Prints "lwp_selfcheck: exact record stream (5 records, twice)" and exits 0, or the records and
 * every difference and exits 1. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "guest/linux/lwp_linux.h"

static struct lwpcb cb __attribute__((aligned(4096)));
static struct lwp_record ring[64] __attribute__((aligned(4096)));
static struct lwp_record first[64];
extern const struct insn_entry selfcheck_insns[], selfcheck_insns_end[];

void *lwp_selfcheck_run(struct lwpcb *cb, void *zero);
__asm__(
    ".text\n"
    ".globl lwp_selfcheck_run\n"
    "lwp_selfcheck_run:\n"
    "  mov %rsi, %rdx\n"      /* rdx = 0 for the final LLWPCB; SYSCALL preserves it */
    LLWPCB_RDI
    TABLE("selfcheck_insns")
    NOPS(5)                   /* 1-5 */
    I("mov $24, %eax")        /* 6 */
    I("syscall")              /* 7 */
    I("nop") B_TAKEN("jmp 2f") "2:\n"          /* 8, 9 */
    I("nop") B_TAKEN("jmp 2f") "2:\n"          /* 10, 11 */
    I("nop") B_TAKEN("jmp 2f") "2:\n"          /* 12, 13 */
    I("xor %eax, %eax") B_NOT_TAKEN("jnz 3f")  /* 14, 15 */
    I("xor %eax, %eax") B_NOT_TAKEN("jnz 3f")  /* 16, 17 */
    NOPS(20)                  /* 18-37 */
    TABLE("selfcheck_insns_end")
    "3:\n"
    SLWPCB_RAX
    LLWPCB_RDX
    "  ret\n");

static int run_once(const char *who, const struct lwp_record *want, size_t n_want) {
  memset(&cb, 0, sizeof cb);
  memset(ring, 0, sizeof ring);
  cb.buffer_size = sizeof ring;
  cb.buffer_base = (uint64_t)(uintptr_t)ring;
  cb.events[0].interval_id = lwp_event(LWP_EVENT_INSTRUCTIONS, 10);
  cb.events[1].interval_id = lwp_event(LWP_EVENT_BRANCHES, 2);
  void *active = lwp_selfcheck_run(&cb, NULL);
  const volatile struct lwpcb *v = &cb;
  int bad = 0;
  if (active != &cb) {
    say("%s: FAIL: SLWPCB returned %p, not the LWPCB %p\n", who, active, (void *)&cb);
    ++bad;
  }
  const uint32_t want_flags = LWP_EN | (1u << LWP_EVENT_INSTRUCTIONS) | (1u << LWP_EVENT_BRANCHES);
  if (v->flags != want_flags || v->missed != 0 || v->tail != 0 || v->head % LWP_RECORD_SIZE) {
    say("%s: FAIL: LWPCB flags %#x (want %#x) missed %llu tail %u head %u\n", who, v->flags,
        want_flags, (unsigned long long)v->missed, v->tail, v->head);
    ++bad;
  }
  const size_t n = v->head / LWP_RECORD_SIZE;
  bad += lwp_compare(who, ring, n, want, n_want, selfcheck_insns[0].address, 0);
  return bad;
}

int main(void) {
  const char *who = "lwp_selfcheck";
  const int pinned = pin_to_cpu(0);
  int core = apic_id_of(0);
  if (pinned != 0 || core < 0) {
    say("%s: FAIL: cannot pin to CPU 0 (%d) or read its APIC ID (%d)\n", who, pinned, core);
    return 1;
  }
  struct dyn_insn trace[64];
  const size_t n = trace_straight(selfcheck_insns, selfcheck_insns_end, trace, 0, 64);
  static const unsigned slots[2][2] = {{LWP_EVENT_INSTRUCTIONS, 10}, {LWP_EVENT_BRANCHES, 2}};
  struct lwp_record want[64];
  const size_t n_want = lwp_expected(trace, n, slots, 2, (uint8_t)core, want, 64);
  /* The hand derivation above, against the engine: 37 instructions, records at 10, 11, 15, 20,
   * 30 (1-based), in that order. */
  static const unsigned by_hand[] = {10, 11, 15, 20, 30};
  int bad = n != 37 || n_want != 5;
  for (size_t i = 0; !bad && i < 5; ++i) bad |= want[i].rip != trace[by_hand[i] - 1].rip;
  if (bad) {
    say("%s: FAIL: the expectation engine disagrees with the derivation (%zu insns, %zu records)\n",
        who, n, n_want);
    return 1;
  }
  bad += run_once(who, want, n_want);
  memcpy(first, ring, sizeof ring);
  bad += run_once(who, want, n_want);
  if (memcmp(first, ring, sizeof ring) != 0) {
    say("%s: FAIL: the second run's ring differs from the first's\n", who);
    ++bad;
  }
  if (bad) {
    lwp_compare(who, first, n_want, want, n_want, selfcheck_insns[0].address, 1);
    say("%s: FAILED (%d differences)\n", who, bad);
    return 1;
  }
  say("%s: exact record stream (%zu records, twice) core %d\n", who, n_want, core);
  return 0;
}
