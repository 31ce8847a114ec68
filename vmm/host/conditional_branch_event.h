// Which raw host PMU event counts retired conditional branches (DESIGN §4.11) — the event rr
// counts its ticks in, and what the host backend needs to let a guest that counts
// BR_INST_RETIRED.CONDITIONAL run unseen. Hardware has no generic perf event for it: the raw
// event select differs between Intel's big cores, Intel's Atom cores and AMD's Zen cores
// (Intel SDM vol. 3B §20 and the per-model event lists; AMD PPR "Ex_Ret_Cond", PMCx0D1).
#pragma once

#include <cstdint>
#include <string>

#include "vmm/result.h"

namespace vmm {

struct HostCpuIdentity {
  std::string vendor;   // CPUID.0: "GenuineIntel", "AuthenticAMD", "HygonGenuine", ...
  uint32_t family = 0;  // CPUID.1:EAX family + extended family (display family)
  uint32_t model = 0;   // CPUID.1:EAX model + extended model (display model)
  bool hybrid = false;  // CPUID.7.0:EDX[15]: cores of two kinds, whose events differ
  static HostCpuIdentity of_this_host();
};

// The PERF_TYPE_RAW config (event select | umask << 8) counting retired conditional branches on
// `cpu`, or why there is none (one line).
Result<uint64_t> conditional_branch_event(const HostCpuIdentity& cpu);

}  // namespace vmm
