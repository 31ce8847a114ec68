#include "vmm/host/free_run.h"

#include <algorithm>

namespace vmm {
namespace {

// The overflow period for a kind whose `limit`-th event may show something, or nullopt when
// nothing counts that kind (no limit). 0: too close to the boundary for a free run.
std::optional<uint64_t> period_for(uint64_t limit, const FreeRunOptions& options) {
  if (limit == UINT64_MAX) return std::nullopt;
  // The overflow signal may arrive skid_margin events after the period-th: that one must still
  // be short of the limit-th, so period + margin <= limit - 1.
  if (limit <= options.skid_margin + 1) return 0;
  const uint64_t period = limit - 1 - options.skid_margin;
  return period < std::max<uint64_t>(options.min_period, 1) ? 0 : period;
}

}  // namespace

std::optional<FreeRun> plan_free_run(const pmu::UnseenAllowance& allowance,
                                     const FreeRunOptions& options) {
  if (!allowance.possible) return std::nullopt;
  FreeRun run{allowance, period_for(allowance.instructions, options),
              period_for(allowance.branches, options)};
  if (run.instruction_period == 0u || run.branch_period == 0u) return std::nullopt;
  if (run.branch_period && !options.count_branches) return std::nullopt;
  return run;
}

FreeRunAccount account_free_run(const FreeRun& run, pmu::UnseenRetirements counted) {
  // Every branch is an instruction (two host counters read one after the other may disagree).
  counted.branches = std::min(counted.branches, counted.instructions);
  FreeRunAccount account;
  const pmu::UnseenAllowance& a = run.allowance;
  // Within the allowance: the batch takes everything. Beyond it (one kind is enough): the
  // batch takes what the allowance admits of each kind, the rest is past the boundary.
  if (a.admits(counted)) {
    account.batch = counted;
    return account;
  }
  auto below = [](uint64_t limit) { return limit == 0 ? 0 : limit - 1; };
  account.batch.branches = std::min(counted.branches, below(a.branches));
  account.past.branches = counted.branches - account.batch.branches;
  // The branches past the boundary are instructions past it too (where among the counted
  // instructions they fell is unknown: the latest place is assumed).
  account.batch.instructions = std::min(
      {counted.instructions, below(a.instructions), counted.instructions - account.past.branches});
  account.batch.branches = std::min(account.batch.branches, account.batch.instructions);
  account.past.branches = counted.branches - account.batch.branches;
  account.past.instructions = counted.instructions - account.batch.instructions;
  return account;
}

}  // namespace vmm
