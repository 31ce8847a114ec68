/* Per-CPU descriptor tables and the syscall MSRs.
 *
 * GDT: one per CPU, with the VMM's boot layout (0x08 kernel code, 0x10 kernel data, 0x1b user
 * data, 0x23 user code) plus this CPU's TSS at 0x28. CS is not reloaded after LGDT: the new
 * GDT's 0x08 descriptor is identical to the boot one, so the cached CS stays valid (and no far
 * return has to go through the emulator).
 * TSS: RSP0 = this CPU's kernel stack; IST1 NMI, IST2 #DF/#MC, IST3 #DB, IST4 #UD (layout.h).
 * IDT: shared; all gates are 64-bit interrupt gates (IF cleared on entry), DPL 0 except #BP
 * (DPL 3, so a user int3 is reported as #BP rather than #GP). #DB enters debug_entry (entry.S),
 * every other vector its stub in trap_stubs. */
#include "guest/kernel/kernel.h"

struct cpu cpus[MAX_CPUS];
uint8_t cpu_stacks[MAX_CPUS][CPU_BLOCK_SIZE] __attribute__((aligned(PAGE_SIZE)));

struct idt_gate {
  uint16_t offset_low;
  uint16_t selector;
  uint8_t ist;
  uint8_t type_attr;
  uint16_t offset_mid;
  uint32_t offset_high;
  uint32_t reserved;
} __attribute__((packed));
_Static_assert(sizeof(struct idt_gate) == 16, "IDT gate");

static struct idt_gate idt[256] __attribute__((aligned(16)));

struct __attribute__((packed)) descriptor_pointer {
  uint16_t limit;
  uint64_t base;
};

#define STACK_CANARY 0x5354414B43414E59ull /* "YNACKATS" */

struct cpu *this_cpu(void) {
  uint64_t sp;
  __asm__ volatile("mov %%rsp, %0" : "=r"(sp));
  const uint64_t base = (uint64_t)(uintptr_t)cpu_stacks;
  const uint64_t index = (sp - base) >> CPU_BLOCK_SHIFT;
  if (sp < base || index >= MAX_CPUS) panic("kernel running on an unknown stack (rsp=%#llx)",
                                            (unsigned long long)sp);
  return &cpus[index];
}

uint64_t cpu_stack_top(uint32_t cpu, uint32_t offset, uint32_t size) {
  return (uint64_t)(uintptr_t)&cpu_stacks[cpu][offset + size];
}

static void set_gate_to(int vector, const uint8_t *entry, int ist, int dpl) {
  const uint64_t handler = (uint64_t)(uintptr_t)entry;
  idt[vector] = (struct idt_gate){
      .offset_low = (uint16_t)handler,
      .selector = KERNEL_CS,
      .ist = (uint8_t)ist,
      .type_attr = (uint8_t)(0x80 | (dpl << 5) | 0xE), /* present, interrupt gate */
      .offset_mid = (uint16_t)(handler >> 16),
      .offset_high = (uint32_t)(handler >> 32),
      .reserved = 0,
  };
}

static void set_gate(int vector, int ist, int dpl) {
  set_gate_to(vector, trap_stubs + 16 * vector, ist, dpl);
}

void idt_init(void) {
  for (int v = 0; v < 256; ++v) set_gate(v, 0, 0);
  set_gate_to(1, debug_entry, IST_DB, 0); /* the stepper's fast path (entry.S) */
  set_gate(2, IST_NMI, 0);
  set_gate(3, 0, 3);
  set_gate(6, IST_UD, 0);
  set_gate(8, IST_DF, 0);
  set_gate(18, IST_DF, 0);
}

static void write_canaries(uint32_t index) {
  static const uint32_t offsets[] = {KSTACK_OFF, UDSTACK_OFF, NMISTACK_OFF, DFSTACK_OFF,
                                     DBSTACK_OFF};
  for (unsigned i = 0; i < sizeof offsets / sizeof offsets[0]; ++i)
    *(volatile uint64_t *)&cpu_stacks[index][offsets[i]] = STACK_CANARY;
}

/* Called on every trap: a stack that ran into its neighbour is reported instead of silently
 * corrupting it. */
void check_stack_canaries(struct cpu *c) {
  static const uint32_t offsets[] = {KSTACK_OFF, UDSTACK_OFF, NMISTACK_OFF, DFSTACK_OFF,
                                     DBSTACK_OFF};
  static const char *const names[] = {"kernel", "#UD IST", "NMI IST", "#DF IST", "#DB IST"};
  for (unsigned i = 0; i < sizeof offsets / sizeof offsets[0]; ++i)
    if (*(volatile uint64_t *)&cpu_stacks[c->index][offsets[i]] != STACK_CANARY)
      panic("cpu %u: %s stack overflow (canary at %p overwritten)", c->index, names[i],
            (void *)&cpu_stacks[c->index][offsets[i]]);
}

static uint64_t code_descriptor(int dpl) {
  /* base 0, limit 0xFFFFF, G, L (64-bit), P, S, type 0xB (execute/read, accessed) */
  return 0x00AF9B000000FFFFull | ((uint64_t)dpl << 45);
}
static uint64_t data_descriptor(int dpl) {
  /* base 0, limit 0xFFFFF, G, D/B, P, S, type 0x3 (read/write, accessed) */
  return 0x00CF93000000FFFFull | ((uint64_t)dpl << 45);
}

/* As early as possible on each CPU: stack canaries and the IDT, so that a #PF/#GP during the
 * rest of the boot ends in a readable panic instead of a triple fault. (Until cpu_init loads this
 * CPU's TSS, the IST vectors - #DB, NMI, #DF, #MC, #UD - would still fault: the VMM's boot TSS has
 * no IST pointers.) */
void cpu_early_traps(struct cpu *c) {
  write_canaries(c->index);
  struct descriptor_pointer idtr = {sizeof idt - 1, (uint64_t)(uintptr_t)idt};
  __asm__ volatile("lidt %0" : : "m"(idtr) : "memory");
}

void cpu_init(struct cpu *c) {
  const uint32_t i = c->index;

  memset(&c->tss, 0, sizeof c->tss);
  c->tss.rsp[0] = cpu_stack_top(i, KSTACK_OFF, KSTACK_SIZE);
  c->tss.ist[IST_NMI - 1] = cpu_stack_top(i, NMISTACK_OFF, NMISTACK_SIZE);
  c->tss.ist[IST_DF - 1] = cpu_stack_top(i, DFSTACK_OFF, DFSTACK_SIZE);
  c->tss.ist[IST_DB - 1] = cpu_stack_top(i, DBSTACK_OFF, DBSTACK_SIZE);
  c->tss.ist[IST_UD - 1] = cpu_stack_top(i, UDSTACK_OFF, UDSTACK_SIZE);
  c->tss.iomap_base = sizeof(struct tss); /* no I/O permission bitmap */

  const uint64_t tss = (uint64_t)(uintptr_t)&c->tss;
  c->gdt[0] = 0;
  c->gdt[1] = code_descriptor(0);
  c->gdt[2] = data_descriptor(0);
  c->gdt[3] = data_descriptor(3);
  c->gdt[4] = code_descriptor(3);
  c->gdt[5] = (sizeof(struct tss) - 1) | ((tss & 0xFFFFFF) << 16) | (0x9ull << 40) |
              (1ull << 47) | (((tss >> 24) & 0xFF) << 56); /* available 64-bit TSS */
  c->gdt[6] = tss >> 32;

  struct descriptor_pointer gdtr = {sizeof c->gdt - 1, (uint64_t)(uintptr_t)c->gdt};
  struct descriptor_pointer idtr = {sizeof idt - 1, (uint64_t)(uintptr_t)idt};
  __asm__ volatile("lgdt %0" : : "m"(gdtr) : "memory");
  __asm__ volatile("mov %0, %%ds\n\tmov %0, %%es\n\tmov %0, %%ss" : : "r"((uint32_t)KERNEL_DS)
                   : "memory");
  __asm__ volatile("ltr %w0" : : "r"((uint32_t)TSS_SEL) : "memory");
  __asm__ volatile("lidt %0" : : "m"(idtr) : "memory");

  /* SYSCALL: CS = STAR[47:32] = 0x08, SS = 0x10; SYSRET (unused; returns use IRETQ) would
   * derive 0x23/0x1b from STAR[63:48] = 0x10. SFMASK clears TF, IF, DF, IOPL, NT and AC on
   * entry, so on real KVM the CPL-0 trampoline runs with interrupts off and no single-step. */
  uint64_t efer;
  if (rdmsr_safe(MSR_EFER, &efer)) panic("cpu %u: RDMSR EFER faulted", i);
  if (wrmsr_safe(MSR_EFER, efer | EFER_SCE | EFER_NXE)) panic("cpu %u: WRMSR EFER faulted", i);
  if (wrmsr_safe(MSR_STAR, ((uint64_t)KERNEL_DS << 48) | ((uint64_t)KERNEL_CS << 32)) ||
      wrmsr_safe(MSR_LSTAR, TRAMPOLINE_VA) ||
      wrmsr_safe(MSR_SFMASK, RFLAGS_TF | RFLAGS_IF | RFLAGS_DF | RFLAGS_IOPL | RFLAGS_NT |
                                 RFLAGS_AC))
    panic("cpu %u: WRMSR of a SYSCALL MSR faulted", i);
}
