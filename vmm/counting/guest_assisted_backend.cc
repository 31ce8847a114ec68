#include "vmm/counting/guest_assisted_backend.h"

#include <spdlog/spdlog.h>

#include "vmm/snapshot/state_components.h"

namespace vmm {
namespace {

StepContext context_of(const kvm_sregs& s) { return StepContext{s.cr3, s.fs.base, s.gs.base}; }

}  // namespace

GuestAssistedBackend::GuestAssistedBackend(CountedVcpu& vcpu, GuestRam& ram,
                                           const pmu::cache::Geometry& cache)
    : vcpu_(vcpu), stepper_(ram, cache) {
  stepper_.set_model_demand(model_demand_of(vcpu.pmu()));
}

void GuestAssistedBackend::user_entry(uint64_t value, const kvm_sregs& sregs) {
  if (auto retired = stepper_.on_user_entry(value, context_of(sregs))) {
    vcpu_.pmu().retire(*retired, sregs.cr3);
    // A SYSCALL counted late: its next boundary was in the kernel (pmuvm_abi.h).
    vcpu_.page_faults().deliver(vcpu_.index(), [](const LwpPageFaults::Fault&) { return false; });
  }
}

bool GuestAssistedBackend::step_reported(uint64_t value, const kvm_sregs& sregs) {
  if (auto retired = stepper_.on_step(value, context_of(sregs))) {
    vcpu_.pmu().retire(*retired, sregs.cr3);
    vcpu_.add_counted(1);
    // The #DB handler's frame is the boundary after the instruction: the kernel handles it as a
    // user #PF when the VMM marks it (PMUVM_VECTOR_LWP_PAGE_FAULT).
    vcpu_.page_faults().deliver(vcpu_.index(), [&](const LwpPageFaults::Fault& f) {
      if (!stepper_.mark_page_fault(value, f.error_code)) return false;
      vcpu_.kvm().set_cr2(f.linear);
      return true;
    });
  }
  return true;
}

void GuestAssistedBackend::save_state(StateSections& s, const std::string& prefix) {
  s.add_component(prefix + "guest_stepper", GuestAssistedStepper::kStateVersion,
                  archived(stepper_));
}

void GuestAssistedBackend::load_state(const StateSections& s, const std::string& prefix) {
  read_component(s, prefix + "guest_stepper", GuestAssistedStepper::kStateVersion, stepper_);
}

void GuestAssistedBackend::log_closing_lines() const {
  spdlog::info(
      "vCPU {}: guest-assisted stepper: {} CPL-3 and 0 CPL-0 steps, {} CPL-3 "
      "instructions counted",
      vcpu_.index(), stepper_.steps(), vcpu_.counted());
}

}  // namespace vmm
