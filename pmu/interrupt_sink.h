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

  // Raise the local APIC performance-counter interrupt (PMI) of the owning vCPU. The VMM routes it
  // as the guest programmed the LVT performance-counter entry (LVTPC): nothing while masked (it
  // stays pending until unmasked), NMI or a fixed vector per the delivery mode. Intel hardware
  // also sets LVTPC.mask on delivery; a VMM that can write the register does so (pmuvm on KVM
  // cannot without disturbing the LAPIC timer: vmm/machine/vcpu_interrupts.h). Used by
  // counter-overflow PMUs (NetBurst).
  virtual void raise_performance_interrupt() = 0;
};

}  // namespace pmu
