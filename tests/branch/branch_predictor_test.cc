// The modelled branch predictor: exact prediction sequences for loops, indirect targets and
// call/return pairs.
#include "pmu/branch/branch_predictor.h"

#include <gtest/gtest.h>

namespace pmu::branch {
namespace {

TEST(BranchPredictorTest, LoopBranchLearnsTakenAndMispredictsExit) {
  BranchPredictor p;
  // A loop back-edge at 0x1000 (fall-through 0x1002, target 0x0ff0), taken 5 times then not.
  std::vector<bool> correct;
  for (int i = 0; i < 5; ++i)
    correct.push_back(p.resolve(BranchKind::kConditional, true, 0x1000, 0x1002, 0x0ff0).predicted_correctly);
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
  EXPECT_FALSE(p.resolve(BranchKind::kIndirectJump, false, 0x5000, 0x5002, 0x6000).predicted_correctly);
  EXPECT_TRUE(p.resolve(BranchKind::kIndirectJump, false, 0x5000, 0x5002, 0x6000).predicted_correctly);
  EXPECT_FALSE(p.resolve(BranchKind::kIndirectJump, false, 0x5000, 0x5002, 0x7000).predicted_correctly);
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
    correct += p.resolve(BranchKind::kReturn, false, 0x2000, 0x2001, 0x105 + i * 16).predicted_correctly;
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
  EXPECT_FALSE(p.resolve(BranchKind::kIndirectJump, false, 0x5000, 0x5002, 0x6000).predicted_correctly);
}

}  // namespace
}  // namespace pmu::branch
