// How a PMU model raises a page fault on its vCPU without knowing the VMM. LWP's record store
// raises a #PF *trap* (proposal §5.5.6, second option; DESIGN §4.1): the instruction that caused
// the event has retired, and the VMM delivers vector 14 with `error_code` and CR2 = `linear` at
// the next instruction boundary, so the guest's page-fault handler can map the page (demand
// paging, copy-on-write) and the next occurrence of the event stores the record.
#pragma once

#include <cstdint>

namespace pmu {

// #PF error-code bits (Intel SDM Vol. 3 §4.7, AMD APM Vol. 2 §8.4.2).
namespace page_fault {
inline constexpr uint32_t kPresent = 1u << 0;  // P: protection violation (0: page not present)
inline constexpr uint32_t kWrite = 1u << 1;    // W/R: the access was a write
inline constexpr uint32_t kUser = 1u << 2;     // U/S: the access was a user-mode access
}  // namespace page_fault

class PageFaultSink {
 public:
  virtual ~PageFaultSink() = default;

  // Raise #PF on the vCPU that owns the calling model, after the current instruction retired.
  // Called at most once per retired instruction.
  virtual void raise_page_fault(uint64_t linear, uint32_t error_code) = 0;
};

}  // namespace pmu
