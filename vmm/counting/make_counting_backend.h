// The counting backend a CountingChoice names, for one vCPU: the one place that knows them all.
#pragma once

#include <memory>

#include "vmm/counting/counting_backend.h"
#include "vmm/counting/counting_choice.h"
#include "pmu/cache/cache_model.h"

namespace vmm {

// `vcpus`: the VM's vCPU count (the KVM stepper single-steps with TF only with one).
// `kick_signal`: the signal that kicks the vCPU's thread (the host counters' overflow too).
std::unique_ptr<CountingBackend> make_counting_backend(const CountingChoice& choice,
                                                       CountedVcpu& vcpu, GuestRam& ram,
                                                       const pmu::cache::Geometry& cache,
                                                       uint32_t vcpus, int kick_signal);

}  // namespace vmm
