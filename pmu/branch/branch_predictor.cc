#include "pmu/branch/branch_predictor.h"

namespace pmu::branch {
namespace {

// Instruction addresses are byte-granular; fold upper bits in so loops at different pages
// do not alias trivially.
uint32_t hash(uint64_t rip, uint32_t entries) {
  return static_cast<uint32_t>((rip ^ (rip >> 12) ^ (rip >> 24)) % entries);
}

}  // namespace

void BranchPredictor::reset() {
  counters_.fill(1);  // weakly not taken
  targets_.fill(TargetEntry{});
  return_stack_.fill(0);
  return_depth_ = return_top_ = 0;
}

void BranchPredictor::push_return(uint64_t address) {
  return_stack_[return_top_] = address;
  return_top_ = (return_top_ + 1) % kReturnStackDepth;
  if (return_depth_ < kReturnStackDepth) ++return_depth_;
}

bool BranchPredictor::predict_indirect(uint64_t rip, uint64_t target) {
  TargetEntry& e = targets_[hash(rip, kTargetEntries)];
  const bool correct = e.valid && e.tag == rip && e.target == target;
  e = TargetEntry{rip, target, true};
  return correct;
}

BranchInfo BranchPredictor::outcome(BranchKind kind, uint64_t fall_through, uint64_t next_rip) {
  BranchInfo info;
  info.kind = kind;
  info.next_rip = next_rip;
  if (kind != BranchKind::kNone)
    info.taken = kind != BranchKind::kConditional || next_rip != fall_through;
  return info;
}

BranchInfo BranchPredictor::resolve(BranchKind kind, bool direct, uint64_t rip,
                                    uint64_t fall_through, uint64_t next_rip) {
  BranchInfo info = outcome(kind, fall_through, next_rip);
  info.prediction_valid = kind != BranchKind::kNone;
  switch (kind) {
    case BranchKind::kNone: return info;
    case BranchKind::kConditional: {
      uint8_t& c = counters_[hash(rip, kCounterEntries)];
      info.predicted_correctly = (c >= 2) == info.taken;
      if (info.taken && c < 3) ++c;
      if (!info.taken && c > 0) --c;
      return info;
    }
    case BranchKind::kDirectJump: info.predicted_correctly = true; return info;
    case BranchKind::kIndirectJump:
      info.predicted_correctly = predict_indirect(rip, next_rip);
      return info;
    case BranchKind::kCall:
      info.predicted_correctly = direct || predict_indirect(rip, next_rip);
      push_return(fall_through);
      return info;
    case BranchKind::kReturn: {
      if (return_depth_ == 0) {
        info.predicted_correctly = false;
        return info;
      }
      return_top_ = (return_top_ + kReturnStackDepth - 1) % kReturnStackDepth;
      --return_depth_;
      info.predicted_correctly = return_stack_[return_top_] == next_rip;
      return info;
    }
  }
  return info;
}

}  // namespace pmu::branch
