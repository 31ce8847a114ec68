// A warning the guest can cause at will (an MMIO access where no device is) is logged a few
// times, the last of them saying that more are only counted: a guest must not be able to flood
// the host's log (DESIGN §4.12).
#pragma once

#include <cstdint>

namespace vmm {

class LogBudget {
 public:
  enum class Verdict : uint8_t {
    kLog,      // log it
    kLogLast,  // log it, and say that the next ones are not logged
    kQuiet,    // over budget: only counted
  };

  explicit LogBudget(uint64_t lines) : lines_(lines) {}

  // One more occurrence.
  Verdict take() {
    ++seen_;
    if (seen_ < lines_) return Verdict::kLog;
    return seen_ == lines_ ? Verdict::kLogLast : Verdict::kQuiet;
  }
  uint64_t seen() const { return seen_; }

  // What ends the line of a logged occurrence: the last one says that further ones are not.
  static const char* suffix(Verdict v) {
    return v == Verdict::kLogLast ? " (further ones on this vCPU are not logged)" : "";
  }

 private:
  uint64_t lines_;
  uint64_t seen_ = 0;
};

}  // namespace vmm
