// HostCounters on the host PMU (DESIGN §4.11): guest-only perf_event counters of retired
// CPL-3 instructions (and branches, and conditional branches) on the vCPU thread — exclude_host,
// exclude_kernel, exclude_hv — whose overflow sends the run loop's kick signal to that thread, so
// KVM_RUN returns. Counting continues past the overflow until disarm(): the instructions of the
// skid are counted too. Opened on the first arm(), on the vCPU thread that arms them.
#pragma once

#include <optional>
#include <string>

#include "vmm/host/host_counters.h"
#include "vmm/host/perf_counter.h"

namespace vmm {

class PerfHostCounters : public HostCounters {
 public:
  explicit PerfHostCounters(int kick_signal) : kick_signal_(kick_signal) {}

  // Throws VmmError when a counter cannot be opened or programmed (one line).
  void arm(const FreeRun& run) override;
  pmu::UnseenRetirements disarm() override;

  // What this host can count (asked once, at start-up): nullopt, or why not (one line).
  static std::optional<std::string> instructions_unavailable();
  static std::optional<std::string> branches_unavailable();
  static std::optional<std::string> conditional_branches_unavailable();

 private:
  PerfCounter& opened(std::optional<PerfCounter>& slot, const HostEventSpec& spec);
  // Arms `slot` with `period`, or leaves it disarmed without one.
  void arm_one(std::optional<PerfCounter>& slot, const HostEventSpec& spec,
               std::optional<uint64_t> period, bool& armed);
  static uint64_t disarm_one(std::optional<PerfCounter>& slot, bool& armed);

  const int kick_signal_;
  std::optional<PerfCounter> instructions_;
  std::optional<PerfCounter> branches_;
  std::optional<PerfCounter> conditional_branches_;
  std::optional<HostEventSpec> conditional_spec_;  // found on the first run that needs it
  bool branches_armed_ = false;
  bool conditional_branches_armed_ = false;
};

}  // namespace vmm
