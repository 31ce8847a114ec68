// Time as the PMU library sees it: the VMM passes a monotonic clock, tests pass a fake one.
#pragma once

#include <cstdint>

namespace pmu {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t now_ns() = 0;  // monotonic nanoseconds
};

}  // namespace pmu
