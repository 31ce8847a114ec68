#include "vmm/cpu/netburst_config.h"

#include "vmm/vmm_error.h"

namespace vmm {

std::optional<pmu::netburst::Config> netburst_config(const CpuProfile& profile) {
  if (!profile.netburst) return std::nullopt;
  pmu::netburst::Config c;
  c.counters = profile.netburst->counters;
  c.counter_bits = profile.netburst->counter_bits;
  c.threads_per_core = profile.netburst->threads_per_core;
  c.third_level_cache = profile.cache.l3.has_value();
  // IQ_ESCR0/1 exist on family 0xF models 1 and 2 only (pmu/netburst/README.md).
  c.iq_escrs = profile.family == 0xF && profile.model <= 2;
  if (const pmu::Status valid = pmu::netburst::validate(c); !valid.ok())
    throw UsageError("CPU profile " + profile.name + ": NetBurst PMU: " + valid.reason());
  return c;
}

}  // namespace vmm
