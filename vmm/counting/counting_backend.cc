#include "vmm/counting/counting_backend.h"

#include "vmm/vmm_error.h"

namespace vmm {

void CountingBackend::on_debug_exit() {
  // KVM sends debug exits only where guest debugging was set, which only the KVM stepper does.
  throw VmmError("a KVM debug exit that no stepper asked for");
}

}  // namespace vmm
