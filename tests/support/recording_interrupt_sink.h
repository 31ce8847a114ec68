// An InterruptSink for tests: remembers every delivery in order.
#pragma once

#include <cstdint>
#include <vector>

#include "pmu/interrupt_sink.h"

namespace pmu::testing {

class RecordingInterruptSink : public InterruptSink {
 public:
  void deliver_vector(uint8_t vector) override { vectors.push_back(vector); }
  void deliver_nmi() override { ++nmis; }
  void raise_performance_interrupt() override { ++pmis; }

  std::vector<uint8_t> vectors;
  int nmis = 0;
  int pmis = 0;
};

}  // namespace pmu::testing
