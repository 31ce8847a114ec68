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
              period_for(allowance.branches, options),
              period_for(allowance.conditional_branches, options)};
  if (run.instruction_period == 0u || run.branch_period == 0u ||
      run.conditional_branch_period == 0u)
    return std::nullopt;
  if (run.branch_period && !options.count_branches) return std::nullopt;
  if (run.conditional_branch_period && !options.count_conditional_branches) return std::nullopt;
  return run;
}

bool FreeRun::reached_a_period(const pmu::UnseenRetirements& counted) const {
  return (instruction_period && counted.instructions >= *instruction_period) ||
         (branch_period && counted.branches >= *branch_period) ||
         (conditional_branch_period && counted.conditional_branches >= *conditional_branch_period);
}

FreeRunAccount account_free_run(const FreeRun& run, pmu::UnseenRetirements counted) {
  // Every conditional branch is a branch, every branch an instruction (host counters read one
  // after the other may disagree). A kind the run did not count reads 0; no model counts it.
  counted.branches = std::min(counted.branches, counted.instructions);
  counted.conditional_branches =
      std::min(counted.conditional_branches,
               run.counts_branches() ? counted.branches : counted.instructions);
  if (!run.counts_branches()) counted.branches = counted.conditional_branches;
  FreeRunAccount account;
  const pmu::UnseenAllowance& a = run.allowance;
  // Within the allowance: the batch takes everything. Beyond it (one kind is enough): the
  // batch takes what the allowance admits of each kind, the rest is past the boundary.
  if (a.admits(counted)) {
    account.batch = counted;
    return account;
  }
  auto below = [](uint64_t limit) { return limit == 0 ? 0 : limit - 1; };
  pmu::UnseenRetirements& batch = account.batch;
  // The events past the boundary are the last ones counted (where among the counted
  // instructions they fell is unknown: the latest place is assumed), so conditional branches
  // past it are branches past it, and branches past it are instructions past it.
  batch.conditional_branches =
      std::min(counted.conditional_branches, below(a.conditional_branches));
  batch.branches =
      std::min({counted.branches, below(a.branches),
                counted.branches - (counted.conditional_branches - batch.conditional_branches)});
  batch.instructions = std::min({counted.instructions, below(a.instructions),
                                 counted.instructions - (counted.branches - batch.branches)});
  batch.branches = std::min(batch.branches, batch.instructions);
  batch.conditional_branches = std::min(batch.conditional_branches, batch.branches);
  account.past.instructions = counted.instructions - batch.instructions;
  account.past.branches = counted.branches - batch.branches;
  account.past.conditional_branches = counted.conditional_branches - batch.conditional_branches;
  return account;
}

}  // namespace vmm
