#include "pmu/lwp/capabilities.h"

#include <algorithm>

#include "pmu/lwp/architecture.h"

namespace pmu::lwp {

uint32_t Capabilities::lwpcb_size() const { return lwp::lwpcb_size(max_events); }

bool Capabilities::event_available(uint8_t event_id) const {
  if (!available) return false;
  switch (event_id) {
    case kEventInstructionsRetired: return instructions_retired;
    case kEventBranchesRetired: return branches_retired;
    case kEventDcacheMisses: return dcache_misses;
    default: return false;
  }
}

uint32_t Capabilities::max_latency() const {
  // 2^n - 16 with n in [10, 31]: fits in 32 bits.
  return static_cast<uint32_t>((uint64_t{1} << cache_max_bits) - 16);
}

uint32_t Capabilities::edx() const {
  if (!available) return 0;
  uint32_t v = edx::kAvailable;
  if (interrupt) v |= edx::kInterrupt;
  if (instructions_retired) v |= edx::kIre;
  if (branches_retired) v |= edx::kBre;
  if (dcache_misses) v |= edx::kDme;
  return v;
}

uint64_t Capabilities::msr0_allowed() const {
  if (!available) return 0;
  // EDX and LWPMSR0 number the same features differently (DESIGN §4.1): translate per feature.
  uint64_t v = msr0::kEnabled;
  if (interrupt) v |= msr0::kInterrupt;
  if (instructions_retired) v |= msr0::kIre;
  if (branches_retired) v |= msr0::kBre;
  if (dcache_misses) v |= msr0::kDme;
  return v;
}

CpuidLeaf cpuid_leaf(const Capabilities& caps, uint64_t lwpmsr0) {
  CpuidLeaf leaf;
  if (!caps.available) return leaf;
  // EAX uses LWPMSR0's bit positions for EN/IRE/BRE/DME/INT (Table 2 vs Table 3).
  const uint64_t enabled = lwpmsr0 & caps.msr0_allowed();
  leaf.eax = static_cast<uint32_t>(
      enabled & (eax::kEnabled | eax::kIre | eax::kBre | eax::kDme | eax::kInterrupt));
  leaf.ebx = (caps.lwpcb_size() << ebx::kLwpcbSizeShift) |
             (kEventRecordSize << ebx::kEventSizeShift) |
             (uint32_t{caps.max_events} << ebx::kMaxEventsShift) |
             (uint32_t{caps.version} << ebx::kVersionShift);
  leaf.ecx = (caps.cache_max_bits & ecx::kCacheMaxMask) |
             (caps.data_address ? ecx::kDataAddress : 0) |
             (caps.cache_level_filter ? ecx::kCacheLevels : 0) |
             (caps.cache_latency_filter ? ecx::kCacheLatency : 0);
  leaf.edx = caps.edx();
  return leaf;
}

Capabilities capabilities_from_cpuid(const CpuidLeaf& leaf) {
  Capabilities caps;
  caps.available = leaf.edx & edx::kAvailable;
  if (!caps.available) return caps;
  caps.interrupt = leaf.edx & edx::kInterrupt;
  caps.instructions_retired = leaf.edx & edx::kIre;
  caps.branches_retired = leaf.edx & edx::kBre;
  caps.dcache_misses = leaf.edx & edx::kDme;
  caps.max_events = static_cast<uint8_t>(leaf.ebx >> ebx::kMaxEventsShift);
  caps.version = static_cast<uint8_t>(leaf.ebx >> ebx::kVersionShift);
  caps.cache_max_bits = static_cast<uint8_t>(leaf.ecx & ecx::kCacheMaxMask);
  caps.data_address = leaf.ecx & ecx::kDataAddress;
  caps.cache_level_filter = leaf.ecx & ecx::kCacheLevels;
  caps.cache_latency_filter = leaf.ecx & ecx::kCacheLatency;
  return caps;
}

pmu::Status validate(const Capabilities& caps) {
  if (!caps.available) return {};  // "no LWP" is a valid processor
  if (caps.version != kVersion)
    return pmu::Status::refused("LWP version " + std::to_string(caps.version) +
                                " is not supported (only version 1)");
  if (caps.max_events < 1 || caps.max_events > kMaxEventSlots)
    return pmu::Status::refused("LWP max_events " + std::to_string(caps.max_events) +
                                " is outside 1.." + std::to_string(kMaxEventSlots) +
                                " (LWPCBSize is an 8-bit CPUID field)");
  if (caps.cache_max_bits < 10 || caps.cache_max_bits > 31)
    return pmu::Status::refused("LWP cache_max_bits " + std::to_string(caps.cache_max_bits) +
                                " is outside 10..31 (CPUID 0x8000001C ECX[4:0])");
  if (caps.dcache_misses && !caps.cache_level_filter && !caps.cache_latency_filter)
    return pmu::Status::refused(
        "LWP DCache-miss events need a latency or a cache-level filter (proposal §5.4)");
  return {};
}

Capabilities baseline(std::span<const Capabilities> members) {
  Capabilities out;
  if (members.empty()) return out;
  out = members.front();
  for (const Capabilities& m : members.subspan(1)) {
    out.available = out.available && m.available;
    out.interrupt = out.interrupt && m.interrupt;
    out.instructions_retired = out.instructions_retired && m.instructions_retired;
    out.branches_retired = out.branches_retired && m.branches_retired;
    out.dcache_misses = out.dcache_misses && m.dcache_misses;
    out.max_events = std::min(out.max_events, m.max_events);
    out.cache_max_bits = std::min(out.cache_max_bits, m.cache_max_bits);
    out.data_address = out.data_address && m.data_address;
    out.cache_level_filter = out.cache_level_filter && m.cache_level_filter;
    out.cache_latency_filter = out.cache_latency_filter && m.cache_latency_filter;
    out.version = std::min(out.version, m.version);
    out.branch_prediction = out.branch_prediction && m.branch_prediction;
  }
  if (!out.available) return Capabilities{};
  if (out.dcache_misses && !out.cache_level_filter && !out.cache_latency_filter)
    out.dcache_misses = false;
  return out;
}

}  // namespace pmu::lwp
