// Progress of a long run on the terminal (`pmuvm run` with stderr on a terminal): once a second,
// one line on stderr, rewritten in place, with the run's time, the instructions counted and LWP
// records stored so far, and the VM exits per second. Nothing when stderr is not a terminal (logs
// and tests see no progress lines). The guest's console output erases the line first (erase()),
// so the two never mix on one line; the next update draws it again below.
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace vmm {

class ProgressLine {
 public:
  struct Figures {
    uint64_t counted = 0;  // instructions the counting backend handed to the PMU models
    uint64_t records = 0;  // LWP records stored
    uint64_t exits = 0;    // VM exits
  };

  // Shown when `out` is a terminal, or always (`force`: a terminal pmuvm cannot see, as through
  // tools/kvm-host/run), or never (`quiet`).
  explicit ProgressLine(std::FILE* out, bool force = false, bool quiet = false);

  // At `now_ns` (monotonic), with the run's totals: redraws the line when a second passed since
  // the last one (the first after a second of run).
  void update(uint64_t now_ns, const Figures& figures);
  // Takes the line off the terminal (before other output, and at the end of the run).
  void erase();
  bool enabled() const { return enabled_; }

  // The text of the line (without the carriage return and erase sequence).
  static std::string text(double seconds, const Figures& now, double exits_per_second);

 private:
  std::FILE* out_;
  const bool enabled_;
  std::mutex lock_;
  bool shown_ = false;
  uint64_t started_ns_ = 0, last_ns_ = 0;
  uint64_t last_exits_ = 0;
};

}  // namespace vmm
