// The guest-assisted stepper as a counting backend (DESIGN §4.7): the bundled kernel single-steps
// its profiled tasks and reports each step (PMUVM_MSR_STEP) and each return to user mode
// (PMUVM_MSR_USER_ENTRY); the stepper (vmm/precise/guest_assisted_stepper.h) reads the kernel's
// trap frame and this backend hands what retired to the PMU models. No KVM debug exits.
#pragma once

#include "vmm/counting/counting_backend.h"
#include "vmm/precise/guest_assisted_stepper.h"

namespace vmm {

class GuestAssistedBackend : public CountingBackend {
 public:
  GuestAssistedBackend(CountedVcpu& vcpu, GuestRam& ram, const pmu::cache::Geometry& cache);

  void user_entry(uint64_t value, const kvm_sregs& sregs) override;
  bool step_reported(uint64_t value, const kvm_sregs& sregs) override;
  void save_state(StateSections& s, const std::string& prefix) override;
  void load_state(const StateSections& s, const std::string& prefix) override;
  void log_closing_lines() const override;
  Steps steps() const override { return {.single = stepper_.steps()}; }

 private:
  CountedVcpu& vcpu_;
  GuestAssistedStepper stepper_;
};

}  // namespace vmm
