// A profile's NetBurst PMU (cpu_profile.h) as the model's configuration (pmu/netburst): what each
// vCPU's PMU is built with, and so what a snapshot's vcpuN.netburst state must fit.
#pragma once

#include <optional>

#include "pmu/netburst/netburst_pmu.h"
#include "vmm/cpu/cpu_profile.h"

namespace vmm {

// nullopt when the profile has no NetBurst PMU; UsageError naming the profile when its PMU is not
// one the model can be (pmu::netburst::validate).
std::optional<pmu::netburst::Config> netburst_config(const CpuProfile& profile);

}  // namespace vmm
