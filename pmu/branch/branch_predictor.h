// A deterministic modelled branch predictor, so branch records carry real prediction bits
// (LWP Figure 3 PRD valid = 1) and NetBurst's branch_retired masks (MMNP/MMNM/MMTP/MMTM) can be
// counted. It is a model, not the host's predictor: a bimodal table of 2-bit counters for
// conditional branches, a direct-mapped branch target buffer for indirect jumps and calls, and a
// return stack for returns. Direct unconditional branches are always predicted correctly, as
// the proposal states (§4.2). Part of the per-vCPU state: same inputs, same predictions.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "pmu/retired_instruction.h"
#include "pmu/state_archive.h"

namespace pmu::branch {

class BranchPredictor {
 public:
  static constexpr int kCounterEntries = 4096;
  static constexpr int kTargetEntries = 512;
  static constexpr int kReturnStackDepth = 16;

  BranchPredictor() { reset(); }

  // Resolves one retired branch: `direct` when the target is encoded in the instruction (JMP rel,
  // CALL rel, Jcc), `fall_through` the address after it, `next_rip` where execution went.
  // Returns the complete BranchInfo (taken, next_rip, prediction) and trains the predictor.
  BranchInfo resolve(BranchKind kind, bool direct, uint64_t rip, uint64_t fall_through,
                     uint64_t next_rip);
  // The same branch without a prediction (prediction_valid false) and without training: for
  // branches that retire while no enabled event reads predictions, so that the predictor's
  // state follows what is in use (DESIGN §4.11: a host PMU's unseen branches never train it).
  static BranchInfo outcome(BranchKind kind, uint64_t fall_through, uint64_t next_rip);

  void reset();

  // Snapshot / migration (pmu/state_archive.h): predictions decide later records' bits.
  template <class Archive>
  void archive(Archive& a) {
    a(counters_, targets_, return_stack_, return_depth_, return_top_);
    if constexpr (Archive::kLoading) {
      // return_top_ indexes the next push: outside the stack it would write anywhere.
      if (return_depth_ < 0 || return_depth_ > kReturnStackDepth || return_top_ < 0 ||
          return_top_ >= kReturnStackDepth)
        throw StateFormatError("branch predictor state: return stack depth " +
                               std::to_string(return_depth_) + ", top " +
                               std::to_string(return_top_) + " (16 entries)");
      for (uint8_t c : counters_)
        if (c > 3)
          throw StateFormatError("branch predictor state: a 2-bit counter holds " +
                                 std::to_string(c));
    }
  }

 private:
  std::array<uint8_t, kCounterEntries> counters_;  // 0,1 predict not taken; 2,3 taken
  struct TargetEntry {
    uint64_t tag = 0;
    uint64_t target = 0;
    bool valid = false;
    template <class Archive>
    void archive(Archive& a) {
      a(tag, target, valid);
    }
  };
  std::array<TargetEntry, kTargetEntries> targets_;
  std::array<uint64_t, kReturnStackDepth> return_stack_;
  int return_depth_ = 0;  // valid entries (<= depth); the oldest are lost on overflow
  int return_top_ = 0;    // index of the next push

  void push_return(uint64_t address);
  bool predict_indirect(uint64_t rip, uint64_t target);
};

}  // namespace pmu::branch
