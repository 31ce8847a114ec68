// Instructions that retired unseen (DESIGN §4.11). A backend that counts with host counters lets
// the guest run between two exits without reporting instructions one by one: it learns only how
// many instructions, of them how many branches, and of those how many conditional branches
// retired at CPL 3 meanwhile (what host PMUs count, and what rr counts its ticks in). A PMU model
// takes such a batch only where nothing it does could have become visible inside it (a record,
// a PMI, an overflow) and where its counts depend on nothing but those numbers; it says how
// large a batch may be through an UnseenAllowance, asked before the guest runs.
#pragma once

#include <algorithm>
#include <cstdint>

namespace pmu {

struct UnseenRetirements {
  uint64_t instructions = 0;  // retired at CPL 3
  uint64_t branches = 0;      // of them, branches (RetiredInstruction::is_branch())
  // of the branches, conditional ones (BranchKind::kConditional: Jcc, JrCXZ, LOOPx)
  uint64_t conditional_branches = 0;
  bool empty() const { return instructions == 0 && branches == 0 && conditional_branches == 0; }
  bool operator==(const UnseenRetirements&) const = default;
};

struct UnseenAllowance {
  // False: an active event needs each instruction's details (its cache accesses, the branch
  // predictor's verdict, its cycles, kernel instructions): the backend must report every
  // instruction. The limits below mean nothing then.
  bool possible = true;
  // A batch must hold fewer than this many instructions, branches and conditional branches:
  // the instructions-th instruction (branches-th branch, ...) may be the one that shows
  // something (1: the next one may; no batch but the empty one).
  uint64_t instructions = UINT64_MAX;
  uint64_t branches = UINT64_MAX;
  uint64_t conditional_branches = UINT64_MAX;

  static UnseenAllowance none() { return {false, 0, 0, 0}; }
  // An empty batch (nothing retired) is always admitted.
  bool admits(const UnseenRetirements& batch) const {
    if (batch.empty()) return true;
    return possible && batch.instructions < instructions && batch.branches < branches &&
           batch.conditional_branches < conditional_branches;
  }
  // What two models (or two events of one) allow together.
  UnseenAllowance& operator&=(const UnseenAllowance& other) {
    possible = possible && other.possible;
    instructions = std::min(instructions, other.instructions);
    branches = std::min(branches, other.branches);
    conditional_branches = std::min(conditional_branches, other.conditional_branches);
    return *this;
  }
  bool operator==(const UnseenAllowance&) const = default;
};

}  // namespace pmu
