#include "vmm/cpu/arch_pmu_config.h"

namespace vmm {

pmu::arch_perfmon::Config arch_pmu_config(const ArchitecturalPmu& pmu, const CpuProfile& profile) {
  pmu::arch_perfmon::Config c;
  c.version = pmu.version;
  c.counters = pmu.counters;
  c.counter_bits = pmu.counter_bits;
  c.fixed_counters = pmu.version >= 2 ? pmu.fixed_counters : 0;
  c.fixed_counter_bits = pmu.fixed_counter_bits;
  c.full_width_writes = profile.has_feature("pdcm");
  c.third_level_cache = profile.cache.l3.has_value();
  c.pebs = pmu.pebs;
  c.lbr = pmu.lbr;
  return c;
}

std::optional<pmu::arch_perfmon::Config> arch_pmu_config(const CpuProfile& profile) {
  if (!profile.architectural_pmu || !profile.architectural_pmu->modelled_by_pmuvm)
    return std::nullopt;
  return arch_pmu_config(*profile.architectural_pmu, profile);
}

}  // namespace vmm
