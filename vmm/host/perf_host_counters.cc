#include "vmm/host/perf_host_counters.h"

#include <linux/perf_event.h>

#include <utility>
#include <variant>

#include "vmm/host/conditional_branch_event.h"
#include "vmm/vmm_error.h"

namespace vmm {
namespace {

// A period no free run reaches: the counter counts without overflowing.
constexpr uint64_t kNoOverflow = uint64_t{1} << 62;

HostEventSpec guest_user_event(uint64_t config, uint32_t type = PERF_TYPE_HARDWARE) {
  return HostEventSpec{type, config, /*count_user=*/true, /*count_kernel=*/false,
                       /*guest_only=*/true};
}

// The conditional-branch event of this host's cores (conditional_branch_event.h).
Result<HostEventSpec> conditional_branches_event() {
  const Result<uint64_t> config = conditional_branch_event(HostCpuIdentity::of_this_host());
  if (auto* error = config.error_message()) return Error::vmm(*error);
  return guest_user_event(config.value(), PERF_TYPE_RAW);
}

std::optional<std::string> unavailable(const HostEventSpec& spec) {
  auto r = PerfCounter::open(spec, 0, 0);
  if (auto* error = r.error_message()) return *error;
  return std::nullopt;
}

}  // namespace

std::optional<std::string> PerfHostCounters::instructions_unavailable() {
  return unavailable(guest_user_event(PERF_COUNT_HW_INSTRUCTIONS));
}

std::optional<std::string> PerfHostCounters::branches_unavailable() {
  return unavailable(guest_user_event(PERF_COUNT_HW_BRANCH_INSTRUCTIONS));
}

std::optional<std::string> PerfHostCounters::conditional_branches_unavailable() {
  const Result<HostEventSpec> spec = conditional_branches_event();
  if (auto* error = spec.error_message()) return *error;
  return unavailable(spec.value());
}

PerfCounter& PerfHostCounters::opened(std::optional<PerfCounter>& slot, const HostEventSpec& spec) {
  if (!slot) {
    auto r = PerfCounter::open(spec, kNoOverflow, kick_signal_);
    if (auto* error = r.error_message())
      throw VmmError("host backend: cannot open a host counter on the vCPU thread: " + *error);
    slot.emplace(std::move(r.value()));
  }
  return *slot;
}

void PerfHostCounters::arm_one(std::optional<PerfCounter>& slot, const HostEventSpec& spec,
                               std::optional<uint64_t> period, bool& armed) {
  armed = period.has_value();
  if (!armed) return;
  PerfCounter& counter = opened(slot, spec);
  counter.reset();
  counter.set_period(*period);
  counter.enable();
}

uint64_t PerfHostCounters::disarm_one(std::optional<PerfCounter>& slot, bool& armed) {
  if (!std::exchange(armed, false) || !slot) return 0;
  slot->disable();
  return slot->read();
}

void PerfHostCounters::arm(const FreeRun& run) {
  PerfCounter& instructions = opened(instructions_, guest_user_event(PERF_COUNT_HW_INSTRUCTIONS));
  instructions.reset();
  instructions.set_period(run.instruction_period.value_or(kNoOverflow));
  arm_one(branches_, guest_user_event(PERF_COUNT_HW_BRANCH_INSTRUCTIONS), run.branch_period,
          branches_armed_);
  if (run.conditional_branch_period && !conditional_spec_) {
    // The start-up probe found the event (else no run counts conditional branches); CPUID is
    // asked once, it may cost an exit when the host is itself a VM.
    const Result<HostEventSpec> spec = conditional_branches_event();
    if (auto* error = spec.error_message()) throw VmmError("host backend: " + *error);
    conditional_spec_ = spec.value();
  }
  if (conditional_spec_)
    arm_one(conditional_branches_, *conditional_spec_, run.conditional_branch_period,
            conditional_branches_armed_);
  else
    conditional_branches_armed_ = false;
  instructions.enable();
}

pmu::UnseenRetirements PerfHostCounters::disarm() {
  pmu::UnseenRetirements counted;
  if (instructions_) {
    instructions_->disable();
    counted.instructions = instructions_->read();
  }
  counted.branches = disarm_one(branches_, branches_armed_);
  counted.conditional_branches = disarm_one(conditional_branches_, conditional_branches_armed_);
  return counted;
}

}  // namespace vmm
