/* Lightweight Profiling from user space: the LWPCB and event records byte-exactly as DESIGN.md
 * §4.2 and spec/lwp-proposal-2007.txt §4 define them, and the LLWPCB/SLWPCB instructions as raw
 * XOP bytes (assemblers may not know them; the kernel emulates them through #UD).
 *
 * Operand size: XOP.W selects it. The forms DESIGN.md §4.3 names, 8f e9 78 12 c0 / c8, have
 * W = 0, i.e. a 32-bit operand: LLWPCB uses the low 32 bits of RAX and SLWPCB zero-extends its
 * result. llwpcb()/slwpcb() emit exactly those bytes, so the LWPCB must lie below 4 GiB (a
 * program's .data/.bss at 0x400000 does). llwpcb64()/slwpcb64() are the W = 1 forms
 * (8f e9 f8 12 c0 / c8) for any address. */
#ifndef PMUVM_GUEST_LIB_LWP_H_
#define PMUVM_GUEST_LIB_LWP_H_

#include <stddef.h>
#include <stdint.h>

/* CPUID 0x8000001C EAX (enabled features) / LWPCB Flags bits. */
#define LWP_EN (1u << 0)
#define LWP_IRE (1u << 1)
#define LWP_BRE (1u << 2)
#define LWP_DME (1u << 3)
#define LWP_INT (1u << 31)

#define LWP_EVENT_INSTRUCTIONS 1
#define LWP_EVENT_BRANCHES 2
#define LWP_EVENT_DCACHE_MISSES 3

#define LWP_RECORD_SIZE 32
/* LWPCBSize is an 8-bit CPUID field: 40 + 8 * MaxEvents <= 255, so at most 26 event slots. */
#define LWP_MAX_EVENT_SLOTS 26

struct lwpcb_event {
  uint32_t interval_id; /* EventInterval [25:0], EventId [31:26]; 0 = slot off */
  uint32_t counter;     /* EventCounter [25:0]; 0 = load from the interval */
};

/* One LWPCB with room for every possible slot, so it is large enough for any CPU profile
 * (LWPCBSize = 40 + 8 * LWPMaxEvents <= 248). Unused slots stay zero (off). */
struct lwpcb {
  uint32_t flags;        /*  0: written by LLWPCB: EN, bit n = EventId n active, INT */
  uint32_t buffer_size;  /*  4: [27:0] bytes (multiple of 32), [31:28] Random */
  uint64_t buffer_base;  /*  8: ring buffer (low 5 bits ignored) */
  uint32_t head;         /* 16: BufferHeadOffset, written by LWP */
  uint32_t tail;         /* 20: BufferTailOffset, written by software */
  uint64_t missed;       /* 24: MissedEvents */
  uint32_t threshold;    /* 32: bytes; 0 = no interrupts */
  uint32_t filters;      /* 36: MinLatency [7:0], CLF 24, NBC 25, RDC 26, RAM 27, OTH 28, NDB 31 */
  struct lwpcb_event events[LWP_MAX_EVENT_SLOTS]; /* 40 + 8 i */
} __attribute__((aligned(16)));

_Static_assert(offsetof(struct lwpcb, flags) == 0, "LWPCB layout (DESIGN.md 4.2)");
_Static_assert(offsetof(struct lwpcb, buffer_size) == 4, "LWPCB layout (DESIGN.md 4.2)");
_Static_assert(offsetof(struct lwpcb, buffer_base) == 8, "LWPCB layout (DESIGN.md 4.2)");
_Static_assert(offsetof(struct lwpcb, head) == 16, "LWPCB layout (DESIGN.md 4.2)");
_Static_assert(offsetof(struct lwpcb, tail) == 20, "LWPCB layout (DESIGN.md 4.2)");
_Static_assert(offsetof(struct lwpcb, missed) == 24, "LWPCB layout (DESIGN.md 4.2)");
_Static_assert(offsetof(struct lwpcb, threshold) == 32, "LWPCB layout (DESIGN.md 4.2)");
_Static_assert(offsetof(struct lwpcb, filters) == 36, "LWPCB layout (DESIGN.md 4.2)");
_Static_assert(offsetof(struct lwpcb, events) == 40, "LWPCB layout (DESIGN.md 4.2)");
_Static_assert(offsetof(struct lwpcb, events[1].interval_id) == 48, "LWPCB layout (DESIGN.md 4.2)");
_Static_assert(offsetof(struct lwpcb, events[2].counter) == 44 + 8 * 2, "LWPCB layout");
_Static_assert(sizeof(struct lwpcb_event) == 8, "LWPCB event slot is 8 bytes");
_Static_assert(sizeof(struct lwpcb) == 256, "40 + 8 * 26 = 248, padded to 16-byte alignment");
_Static_assert(_Alignof(struct lwpcb) == 16, "LWPCBs are 16-byte aligned");

static inline uint32_t lwp_event(unsigned id, uint32_t interval) {
  return (interval & 0x03FFFFFFu) | ((uint32_t)id << 26);
}

/* Fills `cb` for instructions retired every `instructions` (slot 0) and branches retired every
 * `branches` (slot 1) into `ring` of `bytes` (a multiple of 32), no threshold, Random 0. */
static inline void lwpcb_instructions_and_branches(struct lwpcb *cb, void *ring, uint32_t bytes,
                                                   uint32_t instructions, uint32_t branches) {
  *cb = (struct lwpcb){0};
  cb->buffer_size = bytes;
  cb->buffer_base = (uint64_t)(uintptr_t)ring;
  cb->events[0].interval_id = lwp_event(LWP_EVENT_INSTRUCTIONS, instructions);
  cb->events[1].interval_id = lwp_event(LWP_EVENT_BRANCHES, branches);
}

/* A ring-buffer record (proposal Figures 1-4). */
struct lwp_record {
  uint8_t event_id;     /* 0: 1 instructions, 2 branches, 3 DCache misses */
  uint8_t core_id;      /* 1: APIC ID of the vCPU */
  uint16_t flags;       /* 2: bits 31:16 of the first dword (branch: 31 taken, 30 predicted,
                         *    29 prediction valid; DCache: 31:29 source, 28 address valid) */
  uint32_t data;        /* 4: DCache: latency in cycles */
  uint64_t rip;         /* 8: instruction address */
  uint64_t address;     /* 16: branch: next RIP; DCache: data address */
  uint64_t reserved;    /* 24 */
};
_Static_assert(sizeof(struct lwp_record) == LWP_RECORD_SIZE, "LWP records are 32 bytes");
_Static_assert(offsetof(struct lwp_record, rip) == 8, "record layout");
_Static_assert(offsetof(struct lwp_record, address) == 16, "record layout");

/* LLWPCB eax (XOP.W = 0): load the LWPCB whose address is in EAX (0 disables LWP). Returns the
 * previous LWPCB address, which the instruction leaves in EAX (proposal §5.3). */
static inline void *llwpcb(const volatile void *lwpcb) {
  void *previous = (void *)lwpcb;
  __asm__ volatile(".byte 0x8f, 0xe9, 0x78, 0x12, 0xc0" : "+a"(previous) : : "memory");
  return previous;
}
/* SLWPCB eax (XOP.W = 0): flush LWP state into the LWPCB and return its address (0 if off). */
static inline void *slwpcb(void) {
  void *r;
  __asm__ volatile(".byte 0x8f, 0xe9, 0x78, 0x12, 0xc8" : "=a"(r) : : "memory");
  return r;
}
/* The XOP.W = 1 (64-bit operand) forms: llwpcb rax / slwpcb rax. */
static inline void *llwpcb64(const volatile void *lwpcb) {
  void *previous = (void *)lwpcb;
  __asm__ volatile(".byte 0x8f, 0xe9, 0xf8, 0x12, 0xc0" : "+a"(previous) : : "memory");
  return previous;
}
static inline void *slwpcb64(void) {
  void *r;
  __asm__ volatile(".byte 0x8f, 0xe9, 0xf8, 0x12, 0xc8" : "=a"(r) : : "memory");
  return r;
}

#endif /* PMUVM_GUEST_LIB_LWP_H_ */
