// The CPU a guest sees, computed once: from its profile and the PV features its counting backend
// offers (everything but the CPUID table, when the machine is built), and the CPUID table from
// the profile filtered by what this host's KVM supports (present(), when KVM is opened), or the
// table a resumed guest booted with. Everything that needs the guest's CPU reads this: the
// vCPUs' CPUID, MSR values (IA32_MISC_ENABLE), each vCPU's PMU models (LWP capabilities, the
// NetBurst or architectural PMU's configuration), the steppers' cache model, the Linux boot
// signature.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "pmu/arch_perfmon/arch_pmu.h"
#include "pmu/cache/cache_model.h"
#include "pmu/lwp/capabilities.h"
#include "pmu/netburst/netburst_pmu.h"
#include "vmm/cpu/cpu_profile.h"
#include "vmm/cpu/cpuid_table.h"

namespace vmm {

struct GuestCpu {
  // UsageError naming the profile when its NetBurst PMU is not one the model can be.
  GuestCpu(const CpuProfile& profile, uint32_t pv_features);

  // The table the guest sees: the profile's, filtered by `supported` (KVM_GET_SUPPORTED_CPUID;
  // what it drops is said in one warning line), or a resumed guest's own (`resumed`, which the
  // caller checked KVM can present).
  void present(std::span<const CpuidEntry> supported);
  void resume_with(std::vector<CpuidEntry> resumed) { cpuid = std::move(resumed); }

  CpuProfile profile;                   // what the rest was computed from (its name, for messages)
  uint32_t pv_features;                 // what the bundled kernel is offered (CPUID 0x40000001 EAX)
  uint32_t signature;                   // CPUID 1 EAX: family, model, stepping
  std::optional<uint64_t> misc_enable;  // IA32_MISC_ENABLE at boot and on RDMSR
  pmu::lwp::Capabilities lwp;           // available == false: no LWP
  std::optional<pmu::netburst::Config> netburst;  // nullopt: no NetBurst PMU
  // pmuvm's architectural PMU; nullopt: none, or KVM's vPMU gives it (the CPUID table says).
  std::optional<pmu::arch_perfmon::Config> arch_pmu;
  pmu::cache::Geometry cache;     // the steppers' cache model
  std::vector<CpuidEntry> cpuid;  // before per-vCPU APIC IDs; empty until present()/resume_with()
};

}  // namespace vmm
