// The host backend's plan for letting a vCPU run unseen (DESIGN §4.11, rr's method), as pure
// logic: before a KVM_RUN, from what the PMU models allow (pmu/unseen_retirements.h), whether
// the guest may run free and where the host counters must overflow; after it, how the counts
// read back split into what the models take as a batch and what went past an event boundary.
//
// The overflow is placed `skid_margin` events short of the first one that may show something:
// the host PMU's signal ends KVM_RUN some instructions after the overflow (skid), and the rest
// up to the boundary is single-stepped by the precise stepper, so the event itself is seen at
// its exact instruction. A skid larger than the margin has passed the boundary unseen: the
// account says by how much (FreeRunAccount::past), and the run loop falls back to stepping.
#pragma once

#include <cstdint>
#include <optional>

#include "pmu/unseen_retirements.h"

namespace vmm {

struct FreeRunOptions {
  // Events the overflow is placed short of the boundary: at least the host PMU's largest skid
  // in instructions (rr allows about 100 on the Intel and AMD cores it supports).
  uint64_t skid_margin = 128;
  // A run whose overflow would come sooner than this is stepped instead (a run of fewer
  // instructions than its kick and the steps after it cost). 1: a run whenever one fits.
  uint64_t min_period = 1;
  // The host counters can count branches (conditional branches): without, a run that must stop
  // short of such a boundary is stepped.
  bool count_branches = true;
  bool count_conditional_branches = true;
};

// One free run as armed: overflow periods per kind (nullopt: no overflow; instructions are
// always counted, branches and conditional branches only with a period).
struct FreeRun {
  pmu::UnseenAllowance allowance;  // what the models allowed when it was planned
  std::optional<uint64_t> instruction_period;
  std::optional<uint64_t> branch_period;
  std::optional<uint64_t> conditional_branch_period;
  bool counts_branches() const { return branch_period.has_value(); }
  bool counts_conditional_branches() const { return conditional_branch_period.has_value(); }
  // The counts reached a period: the host PMU's overflow signal ends (or ended) the run.
  bool reached_a_period(const pmu::UnseenRetirements& counted) const;
  bool operator==(const FreeRun&) const = default;
};

// nullopt: the guest must be stepped (an event needs each instruction, or the boundary is
// within the margin).
std::optional<FreeRun> plan_free_run(const pmu::UnseenAllowance& allowance,
                                     const FreeRunOptions& options);

struct FreeRunAccount {
  // For the models' retire_unseen: everything counted, or (overshot) as much as they allowed.
  pmu::UnseenRetirements batch;
  // Counted beyond the allowance: the boundary went by unseen. These are retired at the
  // instruction the vCPU stopped at, late (the run loop's fall-back).
  pmu::UnseenRetirements past;
  bool overshot() const { return !past.empty(); }
};

// Splits what the counters read after `run` ended (a kick, another exit).
FreeRunAccount account_free_run(const FreeRun& run, pmu::UnseenRetirements counted);

}  // namespace vmm
