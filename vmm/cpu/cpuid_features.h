// The named CPUID feature bits a profile's `features` list may use: one table, name ->
// (leaf, subleaf, register, bit). Names are the Intel SDM / AMD APM mnemonics in lower case
// (Linux's /proc/cpuinfo spells a few differently: sse3 = "pni", clfsh = "clflush", ds = "dts",
// htt = "ht"). The table is documented for users in vmm/profiles/README.md; nothing here needs KVM.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "vmm/cpu/cpu_profile.h"

namespace vmm {

struct CpuidFeature {
  std::string_view name;
  uint32_t leaf = 0;
  uint32_t subleaf = 0;
  CpuidRegister reg = CpuidRegister::kEax;
  uint8_t bit = 0;
  // pmuvm itself provides it, so it is kept whatever KVM_GET_SUPPORTED_CPUID says: LWP (the
  // virtual LWP unit) and hypervisor (pmuvm is the hypervisor; the bit only informs the guest).
  bool emulated_by_pmuvm = false;
};

// Every known feature, grouped by (leaf, register), in bit order.
std::span<const CpuidFeature> cpuid_features();

// The feature called `name`, or nullptr.
const CpuidFeature* find_cpuid_feature(std::string_view name);

}  // namespace vmm
