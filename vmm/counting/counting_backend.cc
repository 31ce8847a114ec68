#include "vmm/counting/counting_backend.h"

#include "vmm/vmm_error.h"

namespace vmm {

std::function<StepAccountant::ModelDemand()> model_demand_of(VcpuPmu& pmu) {
  return [&pmu] {
    return StepAccountant::ModelDemand{pmu.uses_cache_model(), pmu.uses_branch_predictor()};
  };
}

void CountingBackend::on_debug_exit() {
  // KVM sends debug exits only where guest debugging was set, which only the KVM stepper does.
  throw VmmError("a KVM debug exit that no stepper asked for");
}

}  // namespace vmm
