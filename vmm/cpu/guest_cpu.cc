#include "vmm/cpu/guest_cpu.h"

#include "vmm/cpu/arch_pmu_config.h"
#include "vmm/cpu/cache_model_geometry.h"
#include "vmm/cpu/netburst_config.h"

namespace vmm {

GuestCpu::GuestCpu(const CpuProfile& p, uint32_t pv)
    : profile(p),
      pv_features(pv),
      signature(encode_cpuid_signature(p.family, p.model, p.stepping)),
      misc_enable(p.misc_enable),
      lwp(p.lwp),
      netburst(netburst_config(p)),
      arch_pmu(arch_pmu_config(p)),
      cache(cache_model_geometry(p.cache)) {}

void GuestCpu::present(std::span<const CpuidEntry> supported) {
  cpuid = build_guest_cpuid(supported, profile, pv_features);
}

}  // namespace vmm
