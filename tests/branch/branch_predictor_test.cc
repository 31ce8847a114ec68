// The modelled branch predictor: exact prediction sequences for loops, indirect targets and
// call/return pairs.
#include "pmu/branch/branch_predictor.h"

#include <gtest/gtest.h>

#include <vector>

#include "pmu/state_archive.h"
#include "tests/support/state_blob.h"

namespace pmu::branch {
namespace {

TEST(BranchPredictorTest, LoopBranchLearnsTakenAndMispredictsExit) {
  BranchPredictor p;
  // A loop back-edge at 0x1000 (fall-through 0x1002, target 0x0ff0), taken 5 times then not.
  std::vector<bool> correct;
  for (int i = 0; i < 5; ++i)
    correct.push_back(
        p.resolve(BranchKind::kConditional, true, 0x1000, 0x1002, 0x0ff0).predicted_correctly);
  BranchInfo exit = p.resolve(BranchKind::kConditional, true, 0x1000, 0x1002, 0x1002);
  // Counter starts weakly not-taken (1): first taken mispredicted, then 2, 3, 3, 3 -> correct.
  EXPECT_EQ(correct, (std::vector<bool>{false, true, true, true, true}));
  EXPECT_FALSE(exit.taken);
  EXPECT_FALSE(exit.predicted_correctly);
  EXPECT_EQ(exit.next_rip, 0x1002u);
  EXPECT_TRUE(exit.prediction_valid);
}

TEST(BranchPredictorTest, DirectUnconditionalAlwaysCorrectAndTaken) {
  BranchPredictor p;
  BranchInfo j = p.resolve(BranchKind::kDirectJump, true, 0x2000, 0x2002, 0x3000);
  EXPECT_TRUE(j.taken);
  EXPECT_TRUE(j.predicted_correctly);
  BranchInfo c = p.resolve(BranchKind::kCall, true, 0x2010, 0x2015, 0x4000);
  EXPECT_TRUE(c.predicted_correctly);
}

TEST(BranchPredictorTest, IndirectJumpPredictsLastTarget) {
  BranchPredictor p;
  EXPECT_FALSE(
      p.resolve(BranchKind::kIndirectJump, false, 0x5000, 0x5002, 0x6000).predicted_correctly);
  EXPECT_TRUE(
      p.resolve(BranchKind::kIndirectJump, false, 0x5000, 0x5002, 0x6000).predicted_correctly);
  EXPECT_FALSE(
      p.resolve(BranchKind::kIndirectJump, false, 0x5000, 0x5002, 0x7000).predicted_correctly);
}

TEST(BranchPredictorTest, ReturnStackPairsCallsAndReturns) {
  BranchPredictor p;
  p.resolve(BranchKind::kCall, true, 0x100, 0x105, 0x900);
  p.resolve(BranchKind::kCall, true, 0x905, 0x90a, 0xa00);
  EXPECT_TRUE(p.resolve(BranchKind::kReturn, false, 0xa10, 0xa11, 0x90a).predicted_correctly);
  EXPECT_FALSE(p.resolve(BranchKind::kReturn, false, 0x910, 0x911, 0x999).predicted_correctly);
  EXPECT_FALSE(p.resolve(BranchKind::kReturn, false, 0x910, 0x911, 0x105).predicted_correctly)
      << "stack is empty now";
}

TEST(BranchPredictorTest, ReturnStackOverflowLosesOldestEntries) {
  BranchPredictor p;
  for (int i = 0; i < BranchPredictor::kReturnStackDepth + 2; ++i)
    p.resolve(BranchKind::kCall, true, 0x100 + i * 16, 0x105 + i * 16, 0x1000);
  int correct = 0;
  for (int i = BranchPredictor::kReturnStackDepth + 1; i >= 0; --i)
    correct +=
        p.resolve(BranchKind::kReturn, false, 0x2000, 0x2001, 0x105 + i * 16).predicted_correctly;
  EXPECT_EQ(correct, BranchPredictor::kReturnStackDepth);
}

TEST(BranchPredictorTest, NonBranchCarriesNoPrediction) {
  BranchPredictor p;
  BranchInfo n = p.resolve(BranchKind::kNone, false, 0x100, 0x102, 0x102);
  EXPECT_FALSE(n.prediction_valid);
  EXPECT_FALSE(n.taken);
}

TEST(BranchPredictorTest, ResetForgetsHistory) {
  BranchPredictor p;
  p.resolve(BranchKind::kIndirectJump, false, 0x5000, 0x5002, 0x6000);
  p.reset();
  EXPECT_FALSE(
      p.resolve(BranchKind::kIndirectJump, false, 0x5000, 0x5002, 0x6000).predicted_correctly);
}

// A crafted snapshot must not place the return stack's next push (8 bytes) outside the stack, nor
// load a 2-bit counter that holds more than 2 bits.
TEST(BranchPredictorTest, LoadedStateIsCheckedBeforeUse) {
  BranchPredictor p;
  p.resolve(BranchKind::kCall, true, 0x1000, 0x1005, 0x2000);
  pmu::StateWriter w;
  p.archive(w);
  const std::vector<std::byte> good = w.bytes();
  {
    BranchPredictor copy;
    pmu::StateReader r(good);
    copy.archive(r);
  }
  auto patched = [&](size_t offset_from_end, uint32_t value) {
    return pmu::testing::with_u32_from_end(good, offset_from_end, value);
  };
  // The blob ends with return_depth_ (int32) and return_top_ (int32).
  for (const std::vector<std::byte>& bad :
       {patched(4, 100000), patched(4, uint32_t(-1)), patched(8, 17), patched(8, uint32_t(-5))}) {
    BranchPredictor target;
    pmu::StateReader r(bad);
    EXPECT_THROW(target.archive(r), pmu::StateFormatError);
  }
  std::vector<std::byte> counter = good;
  counter[0] = std::byte{4};  // the first saturating counter
  BranchPredictor target;
  pmu::StateReader r(counter);
  EXPECT_THROW(target.archive(r), pmu::StateFormatError);
}

}  // namespace
}  // namespace pmu::branch
