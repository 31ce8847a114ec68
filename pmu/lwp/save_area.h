// The per-vCPU LWP save area (proposal §5.5.2): exactly the volatile state that cannot be
// rebuilt from the LWPCB, plus our PRNG state (DESIGN §4.2) and LWPMSR0, serialised to a
// versioned little-endian binary form for snapshots and migration.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "pmu/status.h"
#include "pmu/lwp/architecture.h"

namespace pmu::lwp {

// What the LWP unit still owes the LWPCB when state was saved between LLWPCB at CPL != 3 and
// the next entry to ring 3 (§5.3), or after a restore (§5.5.2.4).
enum class PendingInit : uint8_t {
  kNone = 0,
  kLlwpcb = 1,   // LLWPCB ran at CPL != 3: read counters/head from the LWPCB, write Flags
  kRestore = 2,  // state restored: read constants from the LWPCB, keep saved head/counters
};

struct SaveArea {
  uint64_t lwpcb_address = 0;                       // 8 bytes (§5.5.2); 0 = LWP off
  uint32_t head_offset = 0;                         // BufferHeadOffset (4 bytes)
  std::array<uint32_t, kMaxEventSlots> counters{};  // 26-bit counters, one per slot
  uint8_t counter_count = 0;                        // = LWPMaxEvents of the saving unit
  // Bit i set: slot i was counting. Not in the proposal's list (it follows from the LWPCB), but
  // it lets a flush before ring 3 write the restored counters without reading the LWPCB.
  uint32_t active_slots = 0;
  bool missed_pending = false;  // MissedEvents must still be incremented (1 bit)
  PendingInit pending = PendingInit::kNone;
  uint64_t prng_state = 0;
  bool operator==(const SaveArea&) const = default;
};

// Everything a snapshot needs to recreate one vCPU's LWP unit.
struct UnitState {
  uint64_t lwpmsr0 = 0;
  SaveArea save_area;
  bool operator==(const UnitState&) const = default;
};

inline constexpr uint16_t kSaveAreaFormatVersion = 1;

std::vector<std::byte> serialize(const UnitState& state);

// The error says what is wrong in one line (bad magic, unsupported version, truncated, ...).
pmu::Result<UnitState> deserialize(std::span<const std::byte> bytes);

}  // namespace pmu::lwp
