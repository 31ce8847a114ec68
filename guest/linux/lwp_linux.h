/* LWP for the Linux guest programs: the LWPCB and record layouts of DESIGN.md §4.2 (the same as
 * guest/lib/lwp.h, which cannot be used here: its library brings the bundled guest's crt0), the
 * raw XOP encodings of DESIGN.md §4.3, and an expectation engine that derives the exact record
 * stream of a known instruction trace with the model's rules (pmu/lwp/lwp_unit.h):
 *   - each slot counts its events down from its interval (Random 0, EventCounter 0 = load from
 *     the interval); the first counted instruction is the one after LLWPCB; the #UD-emulated
 *     LLWPCB/SLWPCB do not retire; SYSCALL is one instruction and not a branch; kernel code and
 *     other tasks never count;
 *   - a counter reaching 0 stores one record for the instruction that caused it (its own RIP;
 *     branches: Address = the next RIP, flags bit 15 = taken) and reloads;
 *   - several counters expiring on one instruction: one record; a slot already waiting at zero
 *     wins, else the lowest slot; the others wait at zero for their next event. */
#ifndef PMUVM_GUEST_LINUX_LWP_LINUX_H_
#define PMUVM_GUEST_LINUX_LWP_LINUX_H_

#include <stddef.h>
#include <stdint.h>

#define LWP_EN (1u << 0)
#define LWP_INT (1u << 31)
#define LWP_EVENT_INSTRUCTIONS 1
#define LWP_EVENT_BRANCHES 2
#define LWP_RECORD_SIZE 32
#define LWP_SLOTS 26

struct lwpcb {
  uint32_t flags, buffer_size;
  uint64_t buffer_base;
  uint32_t head, tail;
  uint64_t missed;
  uint32_t threshold, filters;
  struct {
    uint32_t interval_id, counter;
  } events[LWP_SLOTS];
} __attribute__((aligned(16)));
_Static_assert(offsetof(struct lwpcb, head) == 16 && offsetof(struct lwpcb, missed) == 24 &&
                   offsetof(struct lwpcb, threshold) == 32 && offsetof(struct lwpcb, events) == 40,
               "LWPCB layout (DESIGN.md 4.2)");

struct lwp_record {
  uint8_t event_id, core_id;
  uint16_t flags; /* branch: bit 15 = taken */
  uint32_t data;
  uint64_t rip, address, reserved;
};
_Static_assert(sizeof(struct lwp_record) == LWP_RECORD_SIZE, "records are 32 bytes");

static inline uint32_t lwp_event(unsigned id, uint32_t interval) {
  return (interval & 0x03FFFFFFu) | ((uint32_t)id << 26);
}

/* Raw encodings (DESIGN.md §4.3): XOP map 9, opcode 0x12, /0 LLWPCB, /1 SLWPCB, W = 1, ModRM
 * 11 reg r/m: c0 = rax, c1 = rcx, c2 = rdx, c7 = rdi (LLWPCB); c8 = rax (SLWPCB). */
#define LLWPCB_RAX ".byte 0x8f, 0xe9, 0xf8, 0x12, 0xc0\n"
#define LLWPCB_RDX ".byte 0x8f, 0xe9, 0xf8, 0x12, 0xc2\n"
#define LLWPCB_RDI ".byte 0x8f, 0xe9, 0xf8, 0x12, 0xc7\n"
#define SLWPCB_RAX ".byte 0x8f, 0xe9, 0xf8, 0x12, 0xc8\n"

/* Labelled instructions: each appends {address, kind} to the table section `.rodata.insns`, so
 * expectations use the assembler's addresses. Kinds: */
enum { K_PLAIN = 0, K_TAKEN = 1 /* branch to the next table entry */, K_NOT_TAKEN = 2,
       K_LOOP = 3 /* dec/jnz back to a loop head: taken but in the last iteration */ };
struct insn_entry {
  uint64_t address, kind;
};
#define INSN_(kind, insn) \
  "1: " insn "\n .pushsection .rodata.insns, \"a\"\n .quad 1b, " #kind "\n .popsection\n"
#define I(insn) INSN_(0, insn)
#define B_TAKEN(insn) INSN_(1, insn)
#define B_NOT_TAKEN(insn) INSN_(2, insn)
#define B_LOOP(insn) INSN_(3, insn)
#define NOPS(n) ".rept " #n "\n" I("nop") ".endr\n"
#define TABLE(name) \
  ".pushsection .rodata.insns, \"a\"\n .balign 8\n .globl " name "\n" name ":\n .popsection\n"

/* One retired CPL-3 instruction of a trace. */
struct dyn_insn {
  uint64_t rip, next;
  int branch, taken;
};

/* Appends the straight-line table entries [from, to) to `out` (branches go to the next entry). */
size_t trace_straight(const struct insn_entry *from, const struct insn_entry *to,
                      struct dyn_insn *out, size_t at, size_t cap);
/* Appends `iterations` runs of a loop body [head, end) whose last entry is K_LOOP (taken back to
 * `head`, in the last iteration not taken: falls through to the entry at `end`). Both return the
 * new length; entries beyond `cap` are counted, not stored. */
size_t trace_loop(const struct insn_entry *head, const struct insn_entry *end, unsigned iterations,
                  struct dyn_insn *out, size_t at, size_t cap);

/* The records LWP must store for `trace` with slots {event id, interval}. Returns the count (all
 * of them, even beyond `cap`). core_id goes into every record. */
size_t lwp_expected(const struct dyn_insn *trace, size_t n, const unsigned (*slots)[2],
                    unsigned n_slots, uint8_t core_id, struct lwp_record *out, size_t cap);

/* Compares `n_got` stored records with `n_want` expected ones field by field (EventId, CoreId,
 * RIP; branches also Address and the taken bit; data/reserved 0), printing every record as an
 * offset from `base` and each difference with `who` as the prefix. Returns the number of
 * mismatches. */
int lwp_compare(const char *who, const struct lwp_record *got, size_t n_got,
                const struct lwp_record *want, size_t n_want, uint64_t base, int print_all);

/* APIC ID of logical CPU `cpu` from /proc/cpuinfo, or -1. */
int apic_id_of(int cpu);
/* Pins the caller to `cpu`; 0 or -errno. */
int pin_to_cpu(int cpu);

/* printf to fd 1 with a single write(2) per call, so console lines do not interleave. */
void say(const char *format, ...) __attribute__((format(printf, 1, 2)));

#endif /* PMUVM_GUEST_LINUX_LWP_LINUX_H_ */
