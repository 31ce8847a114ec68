// A PageFaultSink for tests: remembers every #PF raised, in order.
#pragma once

#include <cstdint>
#include <vector>

#include "pmu/page_fault_sink.h"

namespace pmu::testing {

class RecordingPageFaultSink : public PageFaultSink {
 public:
  struct Fault {
    uint64_t linear;
    uint32_t error_code;
    bool operator==(const Fault&) const = default;
  };
  void raise_page_fault(uint64_t linear, uint32_t error_code) override {
    faults.push_back({linear, error_code});
  }

  std::vector<Fault> faults;
};

}  // namespace pmu::testing
