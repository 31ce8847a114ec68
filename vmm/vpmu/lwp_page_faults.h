// LWP's #PF traps of one vCPU (DESIGN §4.1). The unit raises at most one per retired instruction,
// from inside VcpuPmu::retire(); the counting backend that handed it the instruction takes it
// right after that call and delivers it at the instruction boundary the vCPU stopped at, or
// drops it where it cannot be delivered. A dropped trap is harmless: LWP's state did not change,
// so the next occurrence of the event raises it again.
#pragma once

#include <spdlog/spdlog.h>

#include <cstdint>
#include <optional>
#include <utility>

#include "pmu/page_fault_sink.h"

namespace vmm {

struct LwpPageFaults : pmu::PageFaultSink {
  struct Fault {
    uint64_t linear;
    uint32_t error_code;
  };
  std::optional<Fault> pending;
  uint64_t delivered = 0;
  uint64_t dropped = 0;  // raised by an instruction whose next boundary is in the kernel (SYSCALL)

  void raise_page_fault(uint64_t linear, uint32_t error_code) override {
    pending = Fault{linear, error_code};
  }

  // Delivers the trap raised by the instruction just retired, if any, with `deliver(fault)`
  // (false: it cannot be delivered at this boundary).
  template <typename Deliver>
  void deliver(uint32_t vcpu_index, Deliver deliver) {
    const std::optional<Fault> f = std::exchange(pending, std::nullopt);
    if (!f) return;
    const bool done = deliver(*f);
    ++(done ? delivered : dropped);
    spdlog::debug("vCPU {}: LWP #PF trap at {:#x}, error {:#x}: {}", vcpu_index, f->linear,
                  f->error_code, done ? "delivered" : "not deliverable here, dropped");
  }
};

}  // namespace vmm
