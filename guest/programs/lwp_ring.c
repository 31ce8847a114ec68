/* lwp_ring MODE: the LWP ring buffer's head/tail, MissedEvents and threshold interrupts, exactly
 * (proposal §3 Store/Report, Table 4 BufferHeadOffset/MissedEvents/Threshold, §5.5.3; the model's
 * choices in pmu/lwp/lwp_unit.h). One slot counts instructions retired (Random 0); each MODE runs
 * one asm sequence right after LLWPCB, then SLWPCB and LLWPCB 0 (both emulated: they do not
 * retire). Instruction k of a sequence is the k-th after LLWPCB; every one has a label, so record
 * RIPs are checked against the assembler's addresses. Records are 32 bytes.
 *
 * full: 3-record ring (96 bytes), threshold 0, interval 5, 32 nops, software never drains.
 *   Records at instructions 5, 10, 15, 20, 25, 30. A store that would make head == tail keeps
 *   head and counts a missed event instead ("the last event record is overwritten"): 5 -> offset
 *   0 (head 32), 10 -> 32 (head 64), 15, 20, 25, 30 -> 64 each, MissedEvents 4. Instructions 33
 *   and 34 read BufferHeadOffset while LWP is still on: 64, because a full buffer forces the head
 *   to memory (§5.5.3). After SLWPCB: head 64, tail 0, Flags EN|IRE (no INT: threshold 0),
 *   ring = {5, 10, 30}, no interrupt.
 * threshold: 8-record ring (256 bytes), threshold 96 (3 records), interval 4. Software drains at
 *   fixed points by writing BufferTailOffset and calls lwp_wait(0) (syscall 3: mov $3,%eax;
 *   xor %edi,%edi; syscall; store the result). Records at 4, 8, ..., 60 (never on a SYSCALL):
 *      4,8,12  head 32,64,96: used 96 == threshold -> interrupt 1
 *      15      lwp_wait -> 1;  16 head 128 (used 128: no interrupt);  17 tail = 128
 *      20,24,28  head 160,192,224: used 32,64,96 -> interrupt 2 at 28
 *      31      lwp_wait -> 1;  32 head wraps to 0 (used 128);  33 tail = 192
 *      36      head 32: used (32 - 192) mod 256 = 96 -> interrupt 3;  40 head 64
 *      43      lwp_wait -> 1;  44 head 96;  47 lwp_wait -> 0;  48 head 128;  52 head 160
 *      56,60   head + 32 == tail (192): full, stored at 160, head stays, MissedEvents 1, 2
 *   After SLWPCB: head 160, tail 192, MissedEvents 2, Flags EN|IRE|INT; ring offsets 0..224 hold
 *   the records of 36, 40, 44, 48, 52, 60, 28, 32; lwp_wait after LLWPCB 0 -> 0.
 * storm: 4-record ring (128 bytes), threshold 32 (an interrupt for every record), interval 4:
 *   4 nops, then 20 x (tail = head; nop; nop; nop): records at 4, 8, ..., 84, each one taking the
 *   used space from 0 to 32, so 21 threshold crossings; after SLWPCB head 32, tail 0, no missed
 *   events. lwp_wait(0) after LLWPCB 0, and lwp_wait(3000) if not all 21 arrived (pmuvm's
 *   --max-interrupt-rate holds interrupts back and coalesces them, so a throttled run sees fewer;
 *   at most one stays held), give the total the kernel delivered, printed for the test to compare
 *   with the VMM's counts.
 * Prints every record and PASS, or FAIL lines with the difference; exits 1 on a mismatch. */
#include "guest/lib/lwp.h"
#include "guest/lib/pmuvm.h"

static struct lwpcb cb;
static struct lwp_record ring[8] __attribute__((aligned(4096)));

/* Instruction addresses of each sequence, in order (one .quad per instruction). */
extern const uint64_t full_insns[], full_insns_end[];
extern const uint64_t threshold_insns[], threshold_insns_end[];
extern const uint64_t storm_insns[], storm_insns_end[];
/* Each returns what SLWPCB returned. `results` gets the four lwp_wait results (threshold). */
void *lwp_ring_full(struct lwpcb *cb, uint32_t *head_while_on);
void *lwp_ring_threshold(struct lwpcb *cb, uint64_t results[4]);
void *lwp_ring_storm(struct lwpcb *cb);

/* One counted instruction, its address appended to the current table. */
#define I(insn) "1: " insn "\n .pushsection .rodata.lwp_ring_insns, \"a\"\n .quad 1b\n .popsection\n"
#define TABLE(name) \
  ".pushsection .rodata.lwp_ring_insns, \"a\"\n .balign 8\n .globl " name "\n" name ":\n .popsection\n"
#define NOPS(n) ".rept " #n "\n" I("nop") ".endr\n"
#define LWP_WAIT(slot) I("mov $3, %eax") I("xor %edi, %edi") I("syscall") I("mov %rax, " #slot "(%rsi)")

__asm__(
    ".text\n"
    /* rdi = LWPCB (kept in rbx), rsi = where to put BufferHeadOffset as read while LWP is still
     * on, rcx = 0 for the final LLWPCB. */
    ".globl lwp_ring_full\n"
    "lwp_ring_full:\n"
    "  push %rbx\n"
    "  mov %rdi, %rbx\n"
    "  xor %ecx, %ecx\n"
    "  .byte 0x8f, 0xe9, 0xf8, 0x12, 0xc7\n" /* llwpcb rdi */
    TABLE("full_insns")
    NOPS(32)                            /*  1-32 */
    I("mov 16(%rbx), %edx")             /* 33: head in memory, before any flush */
    I("mov %edx, (%rsi)")               /* 34 */
    TABLE("full_insns_end")
    "  .byte 0x8f, 0xe9, 0xf8, 0x12, 0xc8\n" /* slwpcb rax */
    "  .byte 0x8f, 0xe9, 0xf8, 0x12, 0xc1\n" /* llwpcb rcx */
    "  pop %rbx\n"
    "  ret\n"

    /* rdi = LWPCB (kept in rbx: LLWPCB returns the previous LWPCB in its register), rsi = results,
     * rdx = 0 for the final LLWPCB (SYSCALL preserves all but rax, rcx, r11). */
    ".globl lwp_ring_threshold\n"
    "lwp_ring_threshold:\n"
    "  push %rbx\n"
    "  mov %rdi, %rbx\n"
    "  xor %edx, %edx\n"
    "  .byte 0x8f, 0xe9, 0xf8, 0x12, 0xc7\n" /* llwpcb rdi */
    TABLE("threshold_insns")
    NOPS(12)                            /*  1-12 */
    LWP_WAIT(0)                         /* 13-16 */
    I("movl $128, 20(%rbx)")            /* 17: tail = 128 (all consumed) */
    NOPS(11)                            /* 18-28 */
    LWP_WAIT(8)                         /* 29-32 */
    I("movl $192, 20(%rbx)")            /* 33: tail = 192 (two records left) */
    NOPS(7)                             /* 34-40 */
    LWP_WAIT(16)                        /* 41-44 */
    LWP_WAIT(24)                        /* 45-48 */
    NOPS(14)                            /* 49-62 */
    TABLE("threshold_insns_end")
    "  .byte 0x8f, 0xe9, 0xf8, 0x12, 0xc8\n" /* slwpcb rax */
    "  .byte 0x8f, 0xe9, 0xf8, 0x12, 0xc2\n" /* llwpcb rdx */
    "  pop %rbx\n"
    "  ret\n"

    /* rdi = LWPCB (kept in rbx), rcx = 0 for the final LLWPCB (no SYSCALL in this sequence). */
    ".globl lwp_ring_storm\n"
    "lwp_ring_storm:\n"
    "  push %rbx\n"
    "  mov %rdi, %rbx\n"
    "  xor %ecx, %ecx\n"
    "  .byte 0x8f, 0xe9, 0xf8, 0x12, 0xc7\n" /* llwpcb rdi */
    TABLE("storm_insns")
    NOPS(4)
    ".set lwp_ring_tail, 32\n"
    ".rept 20\n"
    I("movl $lwp_ring_tail, 20(%rbx)") NOPS(3)
    ".set lwp_ring_tail, (lwp_ring_tail + 32) % 128\n"
    ".endr\n"
    TABLE("storm_insns_end")
    "  .byte 0x8f, 0xe9, 0xf8, 0x12, 0xc8\n" /* slwpcb rax */
    "  .byte 0x8f, 0xe9, 0xf8, 0x12, 0xc1\n" /* llwpcb rcx */
    "  pop %rbx\n"
    "  ret\n");

static int failed;

static void expect(const char *mode, const char *what, uint64_t got, uint64_t want) {
  if (got == want) return;
  printf_("lwp_ring: %s: FAIL: %s is %llu, expected %llu\n", mode, what, (unsigned long long)got,
          (unsigned long long)want);
  failed = 1;
}

static void setup(uint32_t records, uint32_t threshold, uint32_t interval) {
  memset(&cb, 0, sizeof cb); /* also makes the pages present before LLWPCB */
  memset(ring, 0, sizeof ring);
  cb.buffer_size = records * LWP_RECORD_SIZE;
  cb.buffer_base = (uint64_t)(uintptr_t)ring;
  cb.threshold = threshold;
  cb.events[0].interval_id = lwp_event(LWP_EVENT_INSTRUCTIONS, interval);
}

/* Checks the LWPCB after SLWPCB and the ring against `want` (instruction numbers, 1-based, by
 * ring slot), printing every record as "insn K". */
static void check(const char *mode, void *active, const uint64_t *insns, unsigned n_insns,
                  uint32_t flags, uint32_t head, uint32_t tail, uint64_t missed,
                  const unsigned *want, unsigned records) {
  volatile struct lwpcb *v = &cb;
  if (active != &cb) {
    printf_("lwp_ring: %s: FAIL: SLWPCB returned %p, not the LWPCB %p\n", mode, active, (void *)&cb);
    failed = 1;
  }
  printf_("lwp_ring: %s: flags %#x head %u tail %u missed %llu\n", mode, v->flags, v->head, v->tail,
          (unsigned long long)v->missed);
  expect(mode, "Flags", v->flags, flags);
  expect(mode, "BufferHeadOffset", v->head, head);
  expect(mode, "BufferTailOffset", v->tail, tail);
  expect(mode, "MissedEvents", v->missed, missed);
  for (unsigned i = 0; i < records; ++i) {
    const struct lwp_record *r = &ring[i];
    unsigned k = 0;
    while (k < n_insns && insns[k] != r->rip) ++k;
    printf_("lwp_ring: %s: ring[%u]: event %u core %u insn %u rip=%#llx\n", mode, i, r->event_id,
            r->core_id, k < n_insns ? k + 1 : 0, (unsigned long long)r->rip);
    if (r->event_id != LWP_EVENT_INSTRUCTIONS || r->core_id != 0 || r->flags != 0 || r->data != 0 ||
        r->address != 0 || r->reserved != 0 || k + 1 != want[i]) {
      printf_("lwp_ring: %s: FAIL: ring[%u] should be the record of instruction %u\n", mode, i,
              want[i]);
      failed = 1;
    }
  }
}

static void full(void) {
  setup(3, 0, 5);
  printf_("lwp_ring: full: ring=%p first insn %#llx\n", (void *)ring,
          (unsigned long long)full_insns[0]);
  uint32_t head_while_on = 9999;
  void *active = lwp_ring_full(&cb, &head_while_on);
  printf_("lwp_ring: full: BufferHeadOffset read while LWP is on: %u\n", head_while_on);
  expect("full", "BufferHeadOffset before SLWPCB", head_while_on, 64);
  static const unsigned want[] = {5, 10, 30};
  check("full", active, full_insns, (unsigned)(full_insns_end - full_insns), LWP_EN | LWP_IRE, 64,
        0, 4, want, 3);
  expect("full", "lwp_wait(0)", (uint64_t)sys_lwp_wait(0), 0);
}

static void threshold(void) {
  setup(8, 96, 4);
  printf_("lwp_ring: threshold: ring=%p first insn %#llx\n", (void *)ring,
          (unsigned long long)threshold_insns[0]);
  uint64_t results[4] = {9, 9, 9, 9};
  void *active = lwp_ring_threshold(&cb, results);
  static const unsigned want[] = {36, 40, 44, 48, 52, 60, 28, 32};
  check("threshold", active, threshold_insns, (unsigned)(threshold_insns_end - threshold_insns),
        LWP_EN | LWP_IRE | LWP_INT, 160, 192, 2, want, 8);
  printf_("lwp_ring: threshold: lwp_wait results %llu %llu %llu %llu\n",
          (unsigned long long)results[0], (unsigned long long)results[1],
          (unsigned long long)results[2], (unsigned long long)results[3]);
  expect("threshold", "lwp_wait at instruction 15", results[0], 1);
  expect("threshold", "lwp_wait at instruction 31", results[1], 1);
  expect("threshold", "lwp_wait at instruction 43", results[2], 1);
  expect("threshold", "lwp_wait at instruction 47", results[3], 0);
  expect("threshold", "lwp_wait(0) after LLWPCB 0", (uint64_t)sys_lwp_wait(0), 0);
}

static void storm(void) {
  setup(4, 32, 4);
  void *active = lwp_ring_storm(&cb);
  const unsigned n_insns = (unsigned)(storm_insns_end - storm_insns);
  expect("storm", "instructions in the sequence", n_insns, 84);
  static const unsigned want[] = {84, 72, 76, 80}; /* records 21, 18, 19, 20 by ring slot */
  check("storm", active, storm_insns, n_insns, LWP_EN | LWP_IRE | LWP_INT, 32, 0, 0, want, 4);
  uint64_t total = (uint64_t)sys_lwp_wait(0);
  if (total < 21) total += (uint64_t)sys_lwp_wait(3000); /* at most one is still held back */
  printf_("lwp_ring: storm: 21 threshold crossings, lwp_wait total %llu\n",
          (unsigned long long)total);
  if (total < 1 || total > 21) {
    printf_("lwp_ring: storm: FAIL: lwp_wait total must be 1..21\n");
    failed = 1;
  }
}

int main(int argc, char **argv) {
  struct lwp_info info;
  if (sys_lwp_info(&info) != 0 || !(info.eax & LWP_IRE) || !(info.eax & LWP_INT)) {
    printf_("lwp_ring: FAIL: needs instructions retired and threshold interrupts (eax=%#x)\n",
            info.eax);
    return 1;
  }
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "full") == 0) full();
  else if (strcmp(mode, "threshold") == 0) threshold();
  else if (strcmp(mode, "storm") == 0) storm();
  else {
    printf_("lwp_ring: FAIL: usage: lwp_ring full|threshold|storm\n");
    return 2;
  }
  printf_("lwp_ring: %s: %s\n", mode, failed ? "FAIL" : "PASS");
  return failed;
}
