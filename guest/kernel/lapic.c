/* The local APIC in xAPIC mode through its MMIO page (IA32_APIC_BASE, normally 0xFEE00000),
 * reached through the uncached direct map (mm.c).
 *
 * Timer: periodic at boot_info.timer_hz on TIMER_VECTOR. The LAPIC timer counts the APIC bus
 * clock divided by 16; KVM's in-kernel LAPIC runs that clock at 1 GHz (APIC_BUS_CYCLE_NS = 1, the
 * default unless the VMM changes it with KVM_CAP_X86_APIC_BUS_CYCLES_NS), so the initial count
 * is 1e9 / 16 / hz. If the VMM ever changes the bus cycle, ticks scale with it. */
#include "guest/kernel/kernel.h"

#define APIC_BUS_HZ 1000000000ull
#define APIC_BASE_ENABLE (1ull << 11)
#define APIC_BASE_X2APIC (1ull << 10)

static volatile uint32_t *lapic_mmio;

uint32_t lapic_read(uint32_t reg) { return lapic_mmio[reg / 4]; }
void lapic_write(uint32_t reg, uint32_t value) { lapic_mmio[reg / 4] = value; }
void lapic_eoi(void) { lapic_write(LAPIC_EOI, 0); }

void lapic_init(struct cpu *c) {
  uint64_t base;
  if (rdmsr_safe(MSR_APIC_BASE, &base)) panic("cpu %u: RDMSR IA32_APIC_BASE faulted", c->index);
  if (base & APIC_BASE_X2APIC)
    panic("cpu %u: the local APIC is in x2APIC mode (IA32_APIC_BASE=%#llx); the kernel drives "
          "the xAPIC MMIO interface", c->index, (unsigned long long)base);
  if (!(base & APIC_BASE_ENABLE)) {
    if (wrmsr_safe(MSR_APIC_BASE, base | APIC_BASE_ENABLE))
      panic("cpu %u: enabling the local APIC faulted", c->index);
  }
  const uint64_t phys = base & 0x000FFFFFFFFFF000ull;
  if (phys >= (4ull << 30) && phys >= boot_info.ram_size)
    panic("cpu %u: local APIC at %#llx lies outside the direct map", c->index,
          (unsigned long long)phys);
  volatile uint32_t *mmio = phys_to_virt(phys);
  if (!lapic_mmio) lapic_mmio = mmio; /* all CPUs see their own APIC at the same address */
  else if (lapic_mmio != mmio)
    panic("cpu %u: local APIC base %#llx differs from the boot CPU's", c->index,
          (unsigned long long)phys);

  lapic_write(LAPIC_TPR, 0);
  lapic_write(LAPIC_LVT_LINT0, LVT_MASKED);
  lapic_write(LAPIC_LVT_LINT1, LVT_MASKED);
  lapic_write(LAPIC_LVT_ERROR, LVT_MASKED);
  lapic_write(LAPIC_LVT_TIMER, LVT_MASKED | TIMER_VECTOR);
  lapic_write(LAPIC_LVT_PERF, LVT_MASKED | LVT_DELIVERY_NMI); /* unmasked by pmc_config */
  lapic_write(LAPIC_SVR, 0x100 | SPURIOUS_VECTOR);            /* software enable */
  lapic_write(LAPIC_ESR, 0);
  c->apic_id = lapic_read(LAPIC_ID) >> 24;
}

void lapic_timer_start(void) {
  const uint32_t hz = kcfg.timer_hz;
  if (hz == 0) return; /* PMUVM_TIMER_OFF: the timer LVT stays masked */
  const uint64_t count = APIC_BUS_HZ / 16 / hz;
  lapic_write(LAPIC_TIMER_DIVIDE, 0x3); /* divide by 16 */
  lapic_write(LAPIC_LVT_TIMER, LVT_PERIODIC | TIMER_VECTOR);
  lapic_write(LAPIC_TIMER_INITIAL, (uint32_t)(count ? count : 1));
}
