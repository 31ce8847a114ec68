// The names CPU profiles give LWP's events, enable-policy bits and capability flags
// (vmm/profiles/README.md, `lwp`): one table for the parser, the writer, `pmuvm profiles` and the
// migration check, so a name means the same bit everywhere.
#pragma once

#include <cstdint>
#include <string_view>

#include "pmu/lwp/architecture.h"
#include "pmu/lwp/capabilities.h"

namespace vmm {

// `lwp.events`: the event, whether the processor offers it, and its LWPMSR0 enable bit.
struct LwpEventName {
  std::string_view name;
  bool pmu::lwp::Capabilities::*offered;
  uint64_t policy_bit;
};
inline constexpr LwpEventName kLwpEvents[] = {
    {"IRE", &pmu::lwp::Capabilities::instructions_retired, pmu::lwp::msr0::kIre},
    {"BRE", &pmu::lwp::Capabilities::branches_retired, pmu::lwp::msr0::kBre},
    {"DME", &pmu::lwp::Capabilities::dcache_misses, pmu::lwp::msr0::kDme},
};

// `lwp.enable_policy`: LWPMSR0 bits by name, in bit order.
struct LwpPolicyName {
  std::string_view name;
  uint64_t bit;
};
inline constexpr LwpPolicyName kLwpPolicyBits[] = {
    {"EN", pmu::lwp::msr0::kEnabled},    {"IRE", pmu::lwp::msr0::kIre},
    {"BRE", pmu::lwp::msr0::kBre},       {"DME", pmu::lwp::msr0::kDme},
    {"INT", pmu::lwp::msr0::kInterrupt},
};

}  // namespace vmm
