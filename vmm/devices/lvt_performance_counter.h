// Where a performance-monitoring interrupt goes, by the LAPIC's LVT performance-counter entry
// (LVTPC, offset 0x340; Intel SDM vol. 3 "Local Vector Table"): nowhere while it is masked (the
// PMI stays pending and is retried at the vCPU's next exit), an NMI for delivery mode NMI (100b),
// the entry's vector for fixed mode (000b). Other modes (SMI, INIT, ExtINT) make no sense for a
// PMI; the run loop drops it with a warning. The LAPIC itself is KVM's: only this decision is ours.
#pragma once

#include <cstdint>

namespace vmm {

inline constexpr uint32_t kLvtpcOffset = 0x340;

struct PmiDelivery {
  enum class Route : uint8_t { kHeld, kNmi, kFixed, kUnsupported };
  Route route = Route::kHeld;
  uint8_t vector = 0;         // kFixed: the vector
  uint8_t delivery_mode = 0;  // bits 10:8, for the kUnsupported warning
};

constexpr PmiDelivery route_pmi(uint32_t lvtpc) {
  constexpr uint32_t kMasked = 1u << 16;
  const uint8_t mode = static_cast<uint8_t>((lvtpc >> 8) & 7);
  if (lvtpc & kMasked) return {PmiDelivery::Route::kHeld, 0, mode};
  if (mode == 4) return {PmiDelivery::Route::kNmi, 0, mode};
  if (mode == 0) return {PmiDelivery::Route::kFixed, static_cast<uint8_t>(lvtpc & 0xFF), mode};
  return {PmiDelivery::Route::kUnsupported, 0, mode};
}

}  // namespace vmm
