/* Inline x86-64 helpers for the kernel. Only instructions KVM's emulator handles at CPL 0 (the
 * PVM host interprets kernel code, DESIGN.md §3): no SSE, no xsave, no cmpxchg16b, no int n. */
#ifndef PMUVM_GUEST_KERNEL_X86_H_
#define PMUVM_GUEST_KERNEL_X86_H_

#include <stdint.h>

#define MSR_EFER 0xC0000080u
#define MSR_STAR 0xC0000081u
#define MSR_LSTAR 0xC0000082u
#define MSR_CSTAR 0xC0000083u
#define MSR_SFMASK 0xC0000084u
#define MSR_APIC_BASE 0x1Bu
#define MSR_MISC_ENABLE 0x1A0u
#define MSR_LWP_CFG 0xC0000105u /* LWPMSR0: feature enable */
#define MSR_LWP_CBADDR 0xC0000106u /* LWPMSR1: WRMSR = LLWPCB, RDMSR = SLWPCB */

#define EFER_SCE (1ull << 0)
#define EFER_NXE (1ull << 11)

#define RFLAGS_CF (1ull << 0)
#define RFLAGS_TF (1ull << 8)
#define RFLAGS_IF (1ull << 9)
#define RFLAGS_DF (1ull << 10)
#define RFLAGS_IOPL (3ull << 12)
#define RFLAGS_NT (1ull << 14)
#define RFLAGS_AC (1ull << 18)
/* Flags a user task may set: CF PF AF ZF SF DF OF AC ID (never TF: the kernel owns TF). */
#define RFLAGS_USER_MASK 0x240CD5ull

#define DR6_BS (1ull << 14)

static inline void outb(uint16_t port, uint8_t v) {
  __asm__ volatile("outb %0, %1" : : "a"(v), "Nd"(port));
}
static inline void outl(uint16_t port, uint32_t v) {
  __asm__ volatile("outl %0, %1" : : "a"(v), "Nd"(port));
}
static inline uint8_t inb(uint16_t port) {
  uint8_t v;
  __asm__ volatile("inb %1, %0" : "=a"(v) : "Nd"(port));
  return v;
}

static inline void cpuid(uint32_t leaf, uint32_t subleaf, uint32_t r[4]) {
  __asm__ volatile("cpuid"
                   : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3])
                   : "a"(leaf), "c"(subleaf));
}

static inline void cli(void) { __asm__ volatile("cli" : : : "memory"); }
static inline void sti(void) { __asm__ volatile("sti" : : : "memory"); }
static inline void pause(void) { __asm__ volatile("pause" : : : "memory"); }
__attribute__((noreturn)) static inline void halt_forever(void) {
  for (;;) __asm__ volatile("cli; hlt" : : : "memory");
}

static inline uint64_t read_rflags(void) {
  uint64_t f;
  __asm__ volatile("pushfq; popq %0" : "=r"(f) : : "memory");
  return f;
}
static inline void write_rflags(uint64_t f) {
  __asm__ volatile("pushq %0; popfq" : : "r"(f) : "memory", "cc");
}

static inline uint64_t read_cr2(void) {
  uint64_t v;
  __asm__ volatile("mov %%cr2, %0" : "=r"(v));
  return v;
}
static inline uint64_t read_cr3(void) {
  uint64_t v;
  __asm__ volatile("mov %%cr3, %0" : "=r"(v));
  return v;
}
static inline void write_cr3(uint64_t v) { __asm__ volatile("mov %0, %%cr3" : : "r"(v) : "memory"); }
static inline uint64_t read_cr0(void) {
  uint64_t v;
  __asm__ volatile("mov %%cr0, %0" : "=r"(v));
  return v;
}
static inline uint64_t read_cr4(void) {
  uint64_t v;
  __asm__ volatile("mov %%cr4, %0" : "=r"(v));
  return v;
}
static inline uint64_t read_dr6(void) {
  uint64_t v;
  __asm__ volatile("mov %%dr6, %0" : "=r"(v));
  return v;
}
static inline void write_dr6(uint64_t v) { __asm__ volatile("mov %0, %%dr6" : : "r"(v)); }

/* The exception table: an entry {faulting instruction, fixup} per instruction that may fault at
 * CPL 0 on purpose. The #GP/#PF handlers look the faulting RIP up (trap.c, fixup_lookup) and
 * resume at the fixup, which sets an error and jumps back after the instruction. */
#define EX_TABLE_ENTRY(insn, fixup) \
  ".pushsection __ex_table, \"a\"\n\t.balign 8\n\t.quad " #insn ", " #fixup "\n\t.popsection\n\t"

/* RDMSR/WRMSR that return 0, or -1 when the MSR access raised #GP (the VMM refused it). */
static inline int rdmsr_safe(uint32_t msr, uint64_t *value) {
  uint32_t lo = 0, hi = 0;
  int err = 0;
  __asm__ volatile("1: rdmsr\n\t"
                   "2:\n\t"
                   ".pushsection .fixup, \"ax\"\n\t"
                   "3: movl $-1, %2\n\t"
                   "xorl %0, %0\n\t"
                   "xorl %1, %1\n\t"
                   "jmp 2b\n\t"
                   ".popsection\n\t" EX_TABLE_ENTRY(1b, 3b)
                   : "=a"(lo), "=d"(hi), "+r"(err)
                   : "c"(msr)
                   : "memory");
  *value = ((uint64_t)hi << 32) | lo;
  return err;
}

static inline int wrmsr_safe(uint32_t msr, uint64_t value) {
  int err = 0;
  __asm__ volatile("1: wrmsr\n\t"
                   "2:\n\t"
                   ".pushsection .fixup, \"ax\"\n\t"
                   "3: movl $-1, %0\n\t"
                   "jmp 2b\n\t"
                   ".popsection\n\t" EX_TABLE_ENTRY(1b, 3b)
                   : "+r"(err)
                   : "c"(msr), "a"((uint32_t)value), "d"((uint32_t)(value >> 32))
                   : "memory");
  return err;
}

/* Byte/word accesses to user memory that return 0 or -14 (EFAULT) when they page-fault. The
 * caller checks the range is in the user half first (user_range_ok). */
static inline int get_user_u8(uint8_t *out, uint64_t addr) {
  int err = 0;
  uint32_t v = 0;
  __asm__ volatile("1: movzbl (%2), %1\n\t"
                   "2:\n\t"
                   ".pushsection .fixup, \"ax\"\n\t"
                   "3: movl $-14, %0\n\t"
                   "xorl %1, %1\n\t"
                   "jmp 2b\n\t"
                   ".popsection\n\t" EX_TABLE_ENTRY(1b, 3b)
                   : "+r"(err), "=&r"(v)
                   : "r"(addr)
                   : "memory");
  *out = (uint8_t)v;
  return err;
}

static inline int put_user_u32(uint64_t addr, uint32_t v) {
  int err = 0;
  __asm__ volatile("1: movl %1, (%2)\n\t"
                   "2:\n\t"
                   ".pushsection .fixup, \"ax\"\n\t"
                   "3: movl $-14, %0\n\t"
                   "jmp 2b\n\t"
                   ".popsection\n\t" EX_TABLE_ENTRY(1b, 3b)
                   : "+r"(err)
                   : "r"(v), "r"(addr)
                   : "memory");
  return err;
}

#endif /* PMUVM_GUEST_KERNEL_X86_H_ */
