#include "vmm/precise/debug_slots.h"

namespace vmm {
namespace {

constexpr uint64_t kDr7Reserved1 = 1u << 10;
// Per slot i: L (bit 2i), G (bit 2i+1), R/W (bits 16+4i, 17+4i), LEN (bits 18+4i, 19+4i).
uint64_t slot_bits(int i) { return (3ull << (2 * i)) | (0xFull << (16 + 4 * i)); }

}  // namespace

uint8_t GuestDebugRegisters::held_slots() const {
  uint8_t held = 0;
  for (int i = 0; i < 4; ++i)
    if (dr7 & (3ull << (2 * i))) held |= static_cast<uint8_t>(1u << i);
  return held;
}

size_t place_breakpoints(const GuestDebugRegisters& guest, std::span<const uint64_t> ours,
                         DebugConfig& config) {
  const uint8_t held = guest.held_slots();
  config.address = {};
  config.ours = 0;
  // The guest's exact/enable bits (LE, GE: bits 8 and 9) go along; GD (bit 13) does not: KVM
  // emulates the guest's MOV DR while pmuvm debugs it.
  config.dr7 = kDr7Reserved1 | (guest.dr7 & 0x300);
  for (int i = 0; i < 4; ++i)
    if (held & (1u << i)) {
      config.address[i] = guest.db[i];
      config.dr7 |= guest.dr7 & slot_bits(i);
    }
  size_t placed = 0;
  for (int i = 0; i < 4 && placed < ours.size(); ++i) {
    if (held & (1u << i)) continue;
    config.address[i] = ours[placed++];
    config.dr7 |= 1ull << (2 * i);  // L; R/W = 00 (execute), LEN = 00
    config.ours |= static_cast<uint8_t>(1u << i);
  }
  return placed;
}

uint64_t guest_dr6_bits(uint64_t dr6, const DebugConfig& applied, bool guest_single_step) {
  uint8_t guest_slots = 0;
  for (int i = 0; i < 4; ++i)
    if ((applied.dr7 & (3ull << (2 * i))) && !(applied.ours & (1u << i)))
      guest_slots |= static_cast<uint8_t>(1u << i);
  uint64_t bits = dr6 & guest_slots;
  if (guest_single_step) bits |= dr6 & kDr6SingleStep;
  return bits;
}

uint64_t delivered_dr6(uint64_t guest_dr6, uint64_t bits) {
  // B0-B3 report this #DB alone; BS, BD and BT stay set until software clears them (SDM 17.2.3).
  return ((guest_dr6 & ~kDr6SlotBits) | 0xFFFF0FF0) | bits;
}

}  // namespace vmm
