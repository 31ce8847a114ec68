#include "vmm/counting/make_counting_backend.h"

#include "vmm/counting/emulating_backend.h"
#include "vmm/counting/guest_assisted_backend.h"
#include "vmm/counting/host_counter_backend.h"
#include "vmm/counting/kvm_stepping_backend.h"

namespace vmm {
namespace {

// A manifest's "none": LWP state only, nothing counted (the base class does nothing).
class NoCounting final : public CountingBackend {};

}  // namespace

std::unique_ptr<CountingBackend> make_counting_backend(const CountingChoice& choice,
                                                       CountedVcpu& vcpu, GuestRam& ram,
                                                       const pmu::cache::Geometry& cache,
                                                       uint32_t vcpus, int kick_signal) {
  const bool trap_flag_steps = vcpus == 1;
  switch (choice.stepper) {
    case StepperKind::kAuto:  // resolved by choose_counting; kvm, as it would be
    case StepperKind::kKvm:
    case StepperKind::kKvmSingle: {
      const bool block_steps = choice.stepper != StepperKind::kKvmSingle;
      if (choice.host)
        return std::make_unique<HostCounterBackend>(vcpu, ram, cache, *choice.host, block_steps,
                                                    trap_flag_steps, kick_signal);
      return std::make_unique<KvmSteppingBackend>(vcpu, ram, cache, block_steps, trap_flag_steps);
    }
    case StepperKind::kEmulate:
      return std::make_unique<EmulatingBackend>(vcpu, ram, cache, /*multiple_vcpus=*/vcpus > 1);
    case StepperKind::kGuest: return std::make_unique<GuestAssistedBackend>(vcpu, ram, cache);
    case StepperKind::kNone: break;
  }
  return std::make_unique<NoCounting>();
}

}  // namespace vmm
