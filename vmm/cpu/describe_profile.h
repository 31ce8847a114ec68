// A human-readable summary of a CPU profile, for `pmuvm profiles`.
#pragma once

#include <string>

#include "vmm/cpu/cpu_profile.h"

namespace vmm {

// Several lines, each ending in '\n': name and description, then identity, LWP (with the CPUID
// 0x8000001C words the guest will read), NetBurst, MISC_ENABLE, cache geometry, CPUID overrides
// and baseline members.
std::string describe_profile(const CpuProfile& profile);

}  // namespace vmm
