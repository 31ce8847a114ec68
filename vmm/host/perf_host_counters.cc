#include "vmm/host/perf_host_counters.h"

#include <linux/perf_event.h>

#include <variant>

#include "vmm/vmm_error.h"

namespace vmm {
namespace {

// A period no free run reaches: the counter counts without overflowing.
constexpr uint64_t kNoOverflow = uint64_t{1} << 62;

HostEventSpec guest_user_event(uint64_t config) {
  return HostEventSpec{PERF_TYPE_HARDWARE, config, /*count_user=*/true, /*count_kernel=*/false,
                       /*guest_only=*/true};
}

std::optional<std::string> unavailable(uint64_t config) {
  auto r = PerfCounter::open(guest_user_event(config), 0, 0);
  if (auto* error = r.error_message()) return *error;
  return std::nullopt;
}

}  // namespace

std::optional<std::string> PerfHostCounters::instructions_unavailable() {
  return unavailable(PERF_COUNT_HW_INSTRUCTIONS);
}

std::optional<std::string> PerfHostCounters::branches_unavailable() {
  return unavailable(PERF_COUNT_HW_BRANCH_INSTRUCTIONS);
}

PerfCounter& PerfHostCounters::opened(std::optional<PerfCounter>& slot, uint64_t config) {
  if (!slot) {
    auto r = PerfCounter::open(guest_user_event(config), kNoOverflow, kick_signal_);
    if (auto* error = r.error_message())
      throw VmmError("host backend: cannot open a host counter on the vCPU thread: " + *error);
    slot.emplace(std::move(r.value()));
  }
  return *slot;
}

void PerfHostCounters::arm(const FreeRun& run) {
  PerfCounter& instructions = opened(instructions_, PERF_COUNT_HW_INSTRUCTIONS);
  instructions.reset();
  instructions.set_period(run.instruction_period.value_or(kNoOverflow));
  branches_armed_ = run.counts_branches();
  if (branches_armed_) {
    PerfCounter& branches = opened(branches_, PERF_COUNT_HW_BRANCH_INSTRUCTIONS);
    branches.reset();
    branches.set_period(*run.branch_period);
    branches.enable();
  }
  instructions.enable();
}

pmu::UnseenRetirements PerfHostCounters::disarm() {
  pmu::UnseenRetirements counted;
  if (instructions_) {
    instructions_->disable();
    counted.instructions = instructions_->read();
  }
  if (branches_armed_ && branches_) {
    branches_->disable();
    counted.branches = branches_->read();
  }
  branches_armed_ = false;
  return counted;
}

}  // namespace vmm
