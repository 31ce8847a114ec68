#include "vmm/host/skidding_counter_double.h"

#include <algorithm>

namespace vmm {

void SkiddingCounterDouble::arm(const FreeRun& run) {
  run_ = run;
  counted_ = {};
  kick_at_.reset();
}

pmu::UnseenRetirements SkiddingCounterDouble::disarm() {
  const pmu::UnseenRetirements counted = counted_;
  run_.reset();
  counted_ = {};
  kick_at_.reset();
  return counted;
}

bool SkiddingCounterDouble::count(const pmu::RetiredInstruction& insn) {
  if (!run_ || insn.cpl != 3) return false;
  ++counted_.instructions;
  const bool conditional = insn.branch.kind == pmu::BranchKind::kConditional;
  if (run_->counts_branches() && insn.is_branch()) ++counted_.branches;
  if (run_->counts_conditional_branches() && conditional) ++counted_.conditional_branches;
  const bool overflowed =
      (run_->instruction_period && counted_.instructions == *run_->instruction_period) ||
      (run_->branch_period && insn.is_branch() && counted_.branches == *run_->branch_period) ||
      (run_->conditional_branch_period && conditional &&
       counted_.conditional_branches == *run_->conditional_branch_period);
  if (overflowed && !kick_at_) kick_at_ = counted_.instructions + skid_;
  return kick_at_ && counted_.instructions >= *kick_at_;
}

uint64_t SkiddingCounterDouble::instructions_to_kick() const {
  if (!run_) return UINT64_MAX;
  if (kick_at_) return *kick_at_ > counted_.instructions ? *kick_at_ - counted_.instructions : 1;
  // Before the overflow: each instruction adds at most one event of each kind, so the soonest
  // overflow is this many instructions away; the skid comes after it.
  uint64_t events = UINT64_MAX;
  if (run_->instruction_period)
    events = std::min(events, *run_->instruction_period - counted_.instructions);
  if (run_->branch_period) events = std::min(events, *run_->branch_period - counted_.branches);
  if (run_->conditional_branch_period)
    events = std::min(events, *run_->conditional_branch_period - counted_.conditional_branches);
  return std::max<uint64_t>(events, 1);
}

}  // namespace vmm
