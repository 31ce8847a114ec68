#include "pmu/lwp/lwpcb.h"

#include <array>

namespace pmu::lwp {
namespace {

uint64_t load_le(std::span<const std::byte> b, uint32_t offset, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(b[offset + i]) << (8 * i);
  return v;
}

void store_le(std::span<std::byte> b, uint32_t offset, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b[offset + i] = static_cast<std::byte>(v >> (8 * i));
}

}  // namespace

std::vector<std::byte> encode_lwpcb(const Lwpcb& cb) {
  std::vector<std::byte> out(lwpcb_size(static_cast<uint32_t>(cb.slots.size())));
  store_le(out, lwpcb::kFlags, cb.flags, 4);
  store_le(
      out, lwpcb::kBufferSize,
      (cb.buffer_size & lwpcb::kBufferSizeMask) | (uint32_t{cb.random_bits} << lwpcb::kRandomShift),
      4);
  store_le(out, lwpcb::kBufferBase, cb.buffer_base, 8);
  store_le(out, lwpcb::kBufferHeadOffset, cb.head_offset, 4);
  store_le(out, lwpcb::kBufferTailOffset, cb.tail_offset, 4);
  store_le(out, lwpcb::kMissedEvents, cb.missed_events, 8);
  store_le(out, lwpcb::kThreshold, cb.threshold, 4);
  store_le(out, lwpcb::kFilters, cb.filters, 4);
  for (size_t i = 0; i < cb.slots.size(); ++i) {
    const EventSlot& s = cb.slots[i];
    const uint32_t base = lwpcb::kEventSlots + static_cast<uint32_t>(i) * kLwpcbEventSlotSize;
    store_le(out, base + lwpcb::kSlotInterval,
             (s.interval & lwpcb::kIntervalMask) | (uint32_t{s.event_id} << lwpcb::kEventIdShift),
             4);
    store_le(out, base + lwpcb::kSlotCounter, s.counter & lwpcb::kIntervalMask, 4);
  }
  return out;
}

std::optional<Lwpcb> decode_lwpcb(std::span<const std::byte> b, uint32_t slot_count) {
  if (b.size() < lwpcb_size(slot_count)) return std::nullopt;
  Lwpcb cb;
  cb.flags = static_cast<uint32_t>(load_le(b, lwpcb::kFlags, 4));
  const uint32_t size_word = static_cast<uint32_t>(load_le(b, lwpcb::kBufferSize, 4));
  cb.buffer_size = size_word & lwpcb::kBufferSizeMask;
  cb.random_bits = static_cast<uint8_t>(size_word >> lwpcb::kRandomShift);
  cb.buffer_base = load_le(b, lwpcb::kBufferBase, 8);
  cb.head_offset = static_cast<uint32_t>(load_le(b, lwpcb::kBufferHeadOffset, 4));
  cb.tail_offset = static_cast<uint32_t>(load_le(b, lwpcb::kBufferTailOffset, 4));
  cb.missed_events = load_le(b, lwpcb::kMissedEvents, 8);
  cb.threshold = static_cast<uint32_t>(load_le(b, lwpcb::kThreshold, 4));
  cb.filters = static_cast<uint32_t>(load_le(b, lwpcb::kFilters, 4));
  cb.slots.resize(slot_count);
  for (uint32_t i = 0; i < slot_count; ++i) {
    const uint32_t base = lwpcb::kEventSlots + i * kLwpcbEventSlotSize;
    const uint32_t word = static_cast<uint32_t>(load_le(b, base + lwpcb::kSlotInterval, 4));
    cb.slots[i].interval = word & lwpcb::kIntervalMask;
    cb.slots[i].event_id = static_cast<uint8_t>(word >> lwpcb::kEventIdShift);
    cb.slots[i].counter =
        static_cast<uint32_t>(load_le(b, base + lwpcb::kSlotCounter, 4)) & lwpcb::kIntervalMask;
  }
  return cb;
}

std::optional<Lwpcb> read_lwpcb(GuestMemory& memory, uint64_t linear, uint32_t slot_count) {
  std::vector<std::byte> bytes(lwpcb_size(slot_count));
  if (!memory.read(linear, bytes)) return std::nullopt;
  return decode_lwpcb(bytes, slot_count);
}

bool read_u32(GuestMemory& memory, uint64_t linear, uint32_t& value) {
  std::array<std::byte, 4> b;
  if (!memory.read(linear, b)) return false;
  value = static_cast<uint32_t>(load_le(b, 0, 4));
  return true;
}

bool read_u64(GuestMemory& memory, uint64_t linear, uint64_t& value) {
  std::array<std::byte, 8> b;
  if (!memory.read(linear, b)) return false;
  value = load_le(b, 0, 8);
  return true;
}

bool write_u32(GuestMemory& memory, uint64_t linear, uint32_t value) {
  std::array<std::byte, 4> b;
  store_le(b, 0, value, 4);
  return memory.write(linear, b);
}

bool write_u64(GuestMemory& memory, uint64_t linear, uint64_t value) {
  std::array<std::byte, 8> b;
  store_le(b, 0, value, 8);
  return memory.write(linear, b);
}

}  // namespace pmu::lwp
