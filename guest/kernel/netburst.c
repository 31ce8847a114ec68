/* Intel NetBurst (Pentium 4) PMU driver behind syscalls 5-7 (DESIGN.md §4.4).
 *
 * Present when CPUID (at CPL 0) says GenuineIntel family 0xF; otherwise every pmc_* syscall
 * returns -22. Registers: counters 0x300 + n, CCCRs 0x360 + n (n = 0..17), ESCRs 0x3A0..0x3E1.
 * pmc_config checks that escr_msr is the ESCR that the CCCR's ESCR-select field (bits 15:13)
 * picks for that counter (IA-32 SDM, NetBurst counter/ESCR table) and that no reserved CCCR bit
 * is set, then: CCCR = 0 (stop), ESCR = escr, counter = start (40 bits), CCCR = cccr without OVF.
 * Any invalid combination, or an MSR write the VMM refuses (#GP), returns -22.
 *
 * The counters are per vCPU, not per task: a task that enables a counter is pinned to its vCPU
 * from then on (the scheduler never moves it), so its pmc_read/pmc_pmis see the counters it set.
 *
 * PMIs: a CCCR with OVF_PMI_T0 (bit 26) makes the kernel unmask LVTPC with NMI delivery. The NMI
 * handler, for each such counter whose CCCR has OVF (bit 31): clears OVF, reloads `start`, counts
 * the PMI; then it unmasks LVTPC again (the P4 APIC masks LVTPC when it delivers a PMI). */
#include "guest/kernel/kernel.h"
#include "guest/kernel/netburst_escr.h"

#define PMC_MSR(n) (0x300u + (n))
#define CCCR_MSR(n) (0x360u + (n))
#define CCCR_ENABLE (1ull << 12)
#define CCCR_OVF_PMI_T0 (1ull << 26)
#define CCCR_OVF (1ull << 31)
/* Reserved: bits 11:0, 29:28 (27 OVF_PMI_T1 and 17:16 active thread are accepted), 63:32. */
#define CCCR_RESERVED 0xFFFFFFFF30000FFFull
#define ESCR_RESERVED 0xFFFFFFFF80000000ull
#define COUNTER_MASK ((1ull << 40) - 1)

static bool netburst_present;

void netburst_probe(void) {
  netburst_present = strcmp(kcfg.vendor, "GenuineIntel") == 0 && kcfg.family == 0xF;
  if (!netburst_present) {
    kprintf("kernel: netburst: no NetBurst PMU (%s family %#x); pmc_* syscalls return -22\n",
            kcfg.vendor, kcfg.family);
    return;
  }
  uint64_t misc;
  if (rdmsr_safe(MSR_MISC_ENABLE, &misc))
    kprintf("kernel: netburst: PMU present (GenuineIntel family 0xF); IA32_MISC_ENABLE not "
            "readable\n");
  else
    kprintf("kernel: netburst: PMU present (GenuineIntel family 0xF); IA32_MISC_ENABLE = %#llx "
            "(performance monitoring %savailable)\n", (unsigned long long)misc,
            (misc & (1ull << 7)) ? "" : "NOT ");
}

int64_t netburst_pmc_config(struct cpu *c, struct task *t, uint64_t counter, uint64_t escr_msr,
                            uint64_t escr, uint64_t cccr, uint64_t start) {
  if (!netburst_present || counter >= NETBURST_COUNTERS) return -E_INVAL;
  const unsigned select = (unsigned)((cccr >> 13) & 7);
  const uint32_t expected = netburst_escr_msr((unsigned)counter, select);
  if (expected == 0 || expected != escr_msr) return -E_INVAL;
  if ((cccr & CCCR_RESERVED) || (escr & ESCR_RESERVED)) return -E_INVAL;
  const uint32_t n = (uint32_t)counter;
  if (wrmsr_safe(CCCR_MSR(n), 0) || wrmsr_safe((uint32_t)escr_msr, escr) ||
      wrmsr_safe(PMC_MSR(n), start & COUNTER_MASK))
    return -E_INVAL;
  c->pmc_start[n] = start & COUNTER_MASK;
  c->pmc_pmis[n] = 0;
  if (cccr & CCCR_OVF_PMI_T0) c->pmc_pmi_mask |= 1u << n;
  else c->pmc_pmi_mask &= ~(1u << n);
  if (c->pmc_pmi_mask) lapic_write(LAPIC_LVT_PERF, LVT_DELIVERY_NMI);
  if (wrmsr_safe(CCCR_MSR(n), cccr & ~CCCR_OVF)) return -E_INVAL;
  if ((cccr & CCCR_ENABLE) && t->pinned_cpu < 0) {
    t->pinned_cpu = (int)c->index;
    kprintf("kernel: task %u (%s) enabled NetBurst counter %u: pinned to cpu %u\n", t->id,
            t->name, n, c->index);
  }
  if (cccr & CCCR_ENABLE) t->pmc_active = true;
  return 0;
}

int64_t netburst_pmc_read(struct cpu *c, uint64_t counter) {
  (void)c;
  if (!netburst_present || counter >= NETBURST_COUNTERS) return -E_INVAL;
  uint64_t v;
  if (rdmsr_safe(PMC_MSR((uint32_t)counter), &v)) return -E_INVAL;
  return (int64_t)(v & COUNTER_MASK);
}

int64_t netburst_pmc_pmis(struct cpu *c, struct task *t, uint64_t counter) {
  if (!netburst_present || counter >= NETBURST_COUNTERS) return -E_INVAL;
  const struct cpu *owner = t->pinned_cpu >= 0 ? &cpus[t->pinned_cpu] : c;
  return (int64_t)__atomic_load_n(&owner->pmc_pmis[counter], __ATOMIC_RELAXED);
}

/* NMI handler: runs on the NMI IST stack, may interrupt anything, takes no lock and prints
 * nothing. */
void netburst_nmi(struct cpu *c) {
  bool handled = false;
  const uint32_t mask = c->pmc_pmi_mask;
  for (uint32_t n = 0; n < NETBURST_COUNTERS; ++n) {
    if (!(mask & (1u << n))) continue;
    uint64_t cccr;
    if (rdmsr_safe(CCCR_MSR(n), &cccr) || !(cccr & CCCR_OVF)) continue;
    wrmsr_safe(CCCR_MSR(n), cccr & ~CCCR_OVF);
    wrmsr_safe(PMC_MSR(n), c->pmc_start[n]);
    __atomic_add_fetch(&c->pmc_pmis[n], 1, __ATOMIC_RELAXED);
    handled = true;
  }
  if (mask) lapic_write(LAPIC_LVT_PERF, LVT_DELIVERY_NMI); /* unmask LVTPC */
  if (!handled) ++c->spurious_nmis;
}
