// The LWP control block as a value: decoding it from guest memory and encoding it back
// (byte layout: DESIGN §4.2; fields: proposal §5.4, Table 4).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "pmu/guest_memory.h"
#include "pmu/lwp/architecture.h"

namespace pmu::lwp {

struct EventSlot {
  uint8_t event_id = 0;   // EventId [31:26]; 0 = slot off
  uint32_t interval = 0;  // EventInterval [25:0]; 0 = slot off
  uint32_t counter = 0;   // EventCounter [25:0]; 0 = "load from the interval"
  bool operator==(const EventSlot&) const = default;
};

struct Lwpcb {
  uint32_t flags = 0;
  uint32_t buffer_size = 0;  // bytes, BufferSize [27:0]
  uint8_t random_bits = 0;   // Random [31:28]
  uint64_t buffer_base = 0;  // as stored; the model ignores the low 5 bits
  uint32_t head_offset = 0;
  uint32_t tail_offset = 0;
  uint64_t missed_events = 0;
  uint32_t threshold = 0;
  uint32_t filters = 0;  // MinLatency, CLF/NBC/RDC/RAM/OTH, NDB
  std::vector<EventSlot> slots;

  bool operator==(const Lwpcb&) const = default;

  uint64_t aligned_buffer_base() const { return buffer_base & ~lwpcb::kBufferBaseIgnoredMask; }
  uint32_t min_latency_units() const { return filters & lwpcb::kMinLatencyMask; }
};

// The first `slot_count` slots' bytes follow the 40-byte header.
std::vector<std::byte> encode_lwpcb(const Lwpcb& cb);
std::optional<Lwpcb> decode_lwpcb(std::span<const std::byte> bytes, uint32_t slot_count);

// Reads the whole LWPCB (header + `slot_count` slots) at `linear`; nullopt when unreadable.
std::optional<Lwpcb> read_lwpcb(GuestMemory& memory, uint64_t linear, uint32_t slot_count);

// Little-endian helpers for single LWPCB fields (the model rewrites fields, never the whole block).
bool read_u32(GuestMemory& memory, uint64_t linear, uint32_t& value);
bool read_u64(GuestMemory& memory, uint64_t linear, uint64_t& value);
bool write_u32(GuestMemory& memory, uint64_t linear, uint32_t value);
bool write_u64(GuestMemory& memory, uint64_t linear, uint64_t value);

}  // namespace pmu::lwp
