// A profile's architectural PMU (cpu_profile.h), when pmuvm models it, as the model's
// configuration (pmu/arch_perfmon): what each vCPU's PMU is built with, and so what a snapshot's
// vcpuN.arch_pmu state must fit.
#pragma once

#include <optional>

#include "pmu/arch_perfmon/arch_pmu.h"
#include "vmm/cpu/cpu_profile.h"

namespace vmm {

// `pmu` with what the rest of `profile` decides: PERF_CAPABILITIES (and so the full-width
// counter aliases) exists where CPUID shows PDCM, and the LLC events' last level is the cache
// model's L3 where it has one.
pmu::arch_perfmon::Config arch_pmu_config(const ArchitecturalPmu& pmu, const CpuProfile& profile);

// nullopt when the profile has no architectural PMU or KVM's vPMU provides it. The parser has
// checked that the model can be this PMU (pmu::arch_perfmon::validate).
std::optional<pmu::arch_perfmon::Config> arch_pmu_config(const CpuProfile& profile);

}  // namespace vmm
