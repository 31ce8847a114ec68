// How a PMU model raises an interrupt on its vCPU without knowing the VMM: the VMM routes a
// fixed vector through its (virtual) local APIC, an NMI through its NMI path.
#pragma once

#include <cstdint>

namespace pmu {

class InterruptSink {
 public:
  virtual ~InterruptSink() = default;

  // Deliver fixed-mode interrupt `vector` to the vCPU that owns the calling model.
  virtual void deliver_vector(uint8_t vector) = 0;

  // Deliver an NMI to the vCPU that owns the calling model.
  virtual void deliver_nmi() = 0;
};

}  // namespace pmu
