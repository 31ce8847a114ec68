// The host-counter double (vmm/host/skidding_counter_double.h, DESIGN §4.11): it counts what the
// stepper retires like guest-only host counters and ends the run exactly `skid` instructions
// after a period was reached.
#include "vmm/host/skidding_counter_double.h"

#include <gtest/gtest.h>

namespace vmm {
namespace {

FreeRun Periods(std::optional<uint64_t> instructions, std::optional<uint64_t> branches = {}) {
  FreeRun run;
  run.instruction_period = instructions;
  run.branch_period = branches;
  return run;
}

pmu::RetiredInstruction User(bool branch = false,
                             pmu::BranchKind kind = pmu::BranchKind::kConditional) {
  pmu::RetiredInstruction i;
  i.cpl = 3;
  if (branch) i.branch.kind = kind;
  return i;
}

// Counts instructions until count() asks for the kick; returns how many it took.
uint64_t RunToKick(SkiddingCounterDouble& counter, uint64_t every_nth_branch = 0) {
  for (uint64_t n = 1; n < 1000000; ++n)
    if (counter.count(User(every_nth_branch && n % every_nth_branch == 0))) return n;
  ADD_FAILURE() << "no kick";
  return 0;
}

TEST(SkiddingCounterDouble, CountsNothingUnarmed) {
  SkiddingCounterDouble counter(0);
  EXPECT_FALSE(counter.armed());
  EXPECT_FALSE(counter.count(User()));
  EXPECT_EQ(counter.instructions_to_kick(), UINT64_MAX);
  EXPECT_EQ(counter.disarm().instructions, 0u);
}

TEST(SkiddingCounterDouble, TheKickComesSkidInstructionsAfterThePeriod) {
  for (uint64_t skid : {0u, 1u, 7u, 128u, 129u}) {
    SkiddingCounterDouble counter(skid);
    counter.arm(Periods(100));
    EXPECT_EQ(counter.instructions_to_kick(), 100u);
    EXPECT_EQ(RunToKick(counter), 100 + skid) << "skid " << skid;
    const pmu::UnseenRetirements counted = counter.disarm();
    EXPECT_EQ(counted.instructions, 100 + skid);
    EXPECT_EQ(counted.branches, 0u) << "branches are counted only with a branch period";
    EXPECT_FALSE(counter.armed());
  }
}

TEST(SkiddingCounterDouble, InstructionsToKickNeverOvershootsTheKick) {
  SkiddingCounterDouble counter(5);
  counter.arm(Periods(20));
  uint64_t retired = 0;
  while (true) {
    const uint64_t room = counter.instructions_to_kick();
    ASSERT_GE(room, 1u);
    bool kicked = false;
    for (uint64_t i = 0; i < room && !kicked; ++i) {
      kicked = counter.count(User());
      ++retired;
      if (kicked) {
        EXPECT_EQ(i + 1, room) << "the kick is the last instruction of the room";
      }
    }
    if (kicked) break;
  }
  EXPECT_EQ(retired, 25u);
}

TEST(SkiddingCounterDouble, KernelInstructionsAreNotCounted) {
  SkiddingCounterDouble counter(0);
  counter.arm(Periods(3));
  pmu::RetiredInstruction kernel = User();
  kernel.cpl = 0;
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(counter.count(kernel));
  EXPECT_FALSE(counter.count(User()));
  EXPECT_FALSE(counter.count(User()));
  EXPECT_TRUE(counter.count(User()));
}

TEST(SkiddingCounterDouble, ABranchPeriodOverflowsAtItsBranch) {
  SkiddingCounterDouble counter(2);
  counter.arm(Periods(std::nullopt, 10));
  EXPECT_EQ(RunToKick(counter, 4), 4 * 10 + 2);
  const pmu::UnseenRetirements counted = counter.disarm();
  EXPECT_EQ(counted.instructions, 42u);
  EXPECT_EQ(counted.branches, 10u);
}

TEST(SkiddingCounterDouble, AConditionalBranchPeriodCountsOnlyConditionalBranches) {
  SkiddingCounterDouble counter(3);
  FreeRun run;
  run.conditional_branch_period = 5;
  counter.arm(run);
  // Every 2nd instruction a branch: calls and conditional jumps alternate.
  uint64_t n = 0, kicked_at = 0;
  while (!kicked_at && n < 1000) {
    ++n;
    const bool branch = n % 2 == 0;
    const auto kind = n % 4 == 0 ? pmu::BranchKind::kConditional : pmu::BranchKind::kCall;
    if (counter.count(User(branch, kind))) kicked_at = n;
    EXPECT_GE(counter.instructions_to_kick(), 1u);
  }
  EXPECT_EQ(kicked_at, 5 * 4 + 3) << "the 5th conditional branch is instruction 20, the skid 3";
  const pmu::UnseenRetirements counted = counter.disarm();
  EXPECT_EQ(counted.instructions, 23u);
  EXPECT_EQ(counted.conditional_branches, 5u);
  EXPECT_EQ(counted.branches, 0u) << "no branch period: not counted";
}

TEST(SkiddingCounterDouble, WithTheFreeRunPlanASkidPastTheMarginOvershoots) {
  const FreeRunOptions options{.skid_margin = 16, .min_period = 4};
  const FreeRun run = *plan_free_run({.instructions = 200}, options);
  for (uint64_t skid = 0; skid <= 20; ++skid) {
    SkiddingCounterDouble counter(skid);
    counter.arm(run);
    RunToKick(counter);
    const FreeRunAccount account = account_free_run(run, counter.disarm());
    EXPECT_EQ(account.overshot(), skid > options.skid_margin) << "skid " << skid;
    EXPECT_EQ(account.past.instructions, skid > 16 ? skid - 16 : 0);
  }
}

}  // namespace
}  // namespace vmm
