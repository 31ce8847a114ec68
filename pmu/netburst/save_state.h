// The complete architectural and in-flight state of one vCPU's NetBurst PMU, and its versioned
// little-endian binary form for snapshots and migration (like pmu/lwp/save_area.h).
//
// Format, version 1 (all integers little-endian):
//   "NBPS" | u16 version | u8 counter_count | u8 counter_bits | u32 flags (0)
//   | u32 pending_pmi | u32 edge_previous
//   | counter_count x (u64 counter, u32 cccr)
//   | u8 escr_count (= 45) | 45 x u32 escr   (address order, msr_map.h)
// Counters are stored as read (counter_bits wide), CCCRs and ESCRs as their low 32 bits (their
// upper halves are reserved and always 0).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "pmu/status.h"
#include "pmu/netburst/msr_map.h"

namespace pmu::netburst {

struct PmuState {
  uint8_t counter_count = kMaxCounters;  // counters (and CCCRs) that exist
  uint8_t counter_bits = 40;             // counter width
  std::array<uint64_t, kMaxCounters> counters{};
  std::array<uint32_t, kMaxCounters> cccrs{};
  std::array<uint32_t, kEscrCount> escrs{};  // index = Escr
  // In flight: bit n = counter n overflowed with OVF_PMI_T0 set and its PMI waits for the next
  // event count (SDM timing, netburst_pmu.h).
  uint32_t pending_pmi = 0;
  // Bit n = counter n's edge detector saw a true comparison in its last cycle (filter.h).
  uint32_t edge_previous = 0;
  bool operator==(const PmuState&) const = default;
};

inline constexpr uint16_t kStateFormatVersion = 1;

std::vector<std::byte> serialize(const PmuState& state);

// Checks the format only (magic, version, sizes, counter_count <= 18, width 32..40, reserved
// bits clear); whether the state fits a particular PMU is NetburstPmu::load_state's job. A
// refusal's reason is one line.
pmu::Result<PmuState> deserialize(std::span<const std::byte> bytes);

}  // namespace pmu::netburst
