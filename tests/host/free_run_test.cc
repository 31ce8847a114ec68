// The host backend's free-run plan (vmm/host/free_run.h, DESIGN §4.11): where the host counters
// overflow, when the guest must be stepped instead, and how counts read back split into the
// models' batch and what went past an event boundary.
#include "vmm/host/free_run.h"

#include <gtest/gtest.h>

namespace vmm {
namespace {

using pmu::UnseenAllowance;
using pmu::UnseenRetirements;

constexpr FreeRunOptions kOptions{.skid_margin = 128, .min_period = 64};

TEST(FreeRunPlan, AnEventThatNeedsEachInstructionIsStepped) {
  EXPECT_EQ(plan_free_run(UnseenAllowance::none(), kOptions), std::nullopt);
}

TEST(FreeRunPlan, NothingCountingRunsFreeWithoutOverflow) {
  const auto run = plan_free_run(UnseenAllowance{}, kOptions);
  ASSERT_TRUE(run);
  EXPECT_EQ(run->instruction_period, std::nullopt);
  EXPECT_EQ(run->branch_period, std::nullopt);
  EXPECT_FALSE(run->counts_branches());
}

TEST(FreeRunPlan, TheOverflowComesTheMarginShortOfTheBoundary) {
  // The 1000th instruction may show something: an overflow after 871 plus a skid of up to 128
  // ends the run at the 999th at the latest.
  const auto run = plan_free_run({.instructions = 1000}, kOptions);
  ASSERT_TRUE(run);
  EXPECT_EQ(run->instruction_period, 871u);
  EXPECT_EQ(run->branch_period, std::nullopt);
  const auto branches = plan_free_run({.branches = 500}, kOptions);
  ASSERT_TRUE(branches);
  EXPECT_EQ(branches->branch_period, 371u);
  EXPECT_TRUE(branches->counts_branches());
  EXPECT_EQ(branches->instruction_period, std::nullopt) << "instructions are counted, no overflow";
}

TEST(FreeRunPlan, ABoundaryWithinTheMarginOrTooCloseIsStepped) {
  EXPECT_EQ(plan_free_run({.instructions = 1}, kOptions), std::nullopt);
  EXPECT_EQ(plan_free_run({.instructions = 129}, kOptions), std::nullopt);
  EXPECT_EQ(plan_free_run({.instructions = 128 + 1 + 63}, kOptions), std::nullopt);
  const auto run = plan_free_run({.instructions = 128 + 1 + 64}, kOptions);
  ASSERT_TRUE(run);
  EXPECT_EQ(run->instruction_period, 64u);
  EXPECT_EQ(plan_free_run({.instructions = 100000, .branches = 100}, kOptions), std::nullopt)
      << "one kind too close is enough";
}

TEST(FreeRunPlan, ABranchBoundaryIsSteppedWhereBranchesCannotBeCounted) {
  FreeRunOptions options = kOptions;
  options.count_branches = false;
  EXPECT_EQ(plan_free_run({.branches = 100000}, options), std::nullopt);
  EXPECT_TRUE(plan_free_run({.instructions = 100000}, options));
}

TEST(FreeRunPlan, AConditionalBranchBoundaryHasItsOwnPeriod) {
  const auto run = plan_free_run({.conditional_branches = 1000}, kOptions);
  ASSERT_TRUE(run);
  EXPECT_EQ(run->conditional_branch_period, 871u);
  EXPECT_TRUE(run->counts_conditional_branches());
  EXPECT_FALSE(run->counts_branches());
  EXPECT_EQ(plan_free_run({.conditional_branches = 100}, kOptions), std::nullopt);
  FreeRunOptions options = kOptions;
  options.count_conditional_branches = false;
  EXPECT_EQ(plan_free_run({.conditional_branches = 100000}, options), std::nullopt)
      << "the host cannot count them: stepped";
  EXPECT_TRUE(plan_free_run({.branches = 100000}, options));
}

TEST(FreeRunPlan, APeriodReachedIsAnOverflowOfItsKind) {
  const FreeRun run =
      *plan_free_run({.instructions = 10000, .conditional_branches = 1000}, kOptions);
  EXPECT_FALSE(run.reached_a_period({.instructions = 9000, .conditional_branches = 870}));
  EXPECT_TRUE(run.reached_a_period({.instructions = 9000, .conditional_branches = 871}));
  EXPECT_TRUE(run.reached_a_period({.instructions = 9871}));
  EXPECT_FALSE(run.reached_a_period({.instructions = 9000, .branches = 5000}))
      << "branches have no period in this run";
}

TEST(FreeRunAccount, CountsWithinTheAllowanceAreOneBatch) {
  const FreeRun run = *plan_free_run({.instructions = 1000, .branches = 300}, kOptions);
  const FreeRunAccount a = account_free_run(run, {.instructions = 999, .branches = 299});
  EXPECT_FALSE(a.overshot());
  EXPECT_EQ(a.batch.instructions, 999u);
  EXPECT_EQ(a.batch.branches, 299u);
}

TEST(FreeRunAccount, ASkidUpToTheMarginNeverPassesTheBoundary) {
  for (uint64_t limit : {194u, 195u, 1000u, 123457u})
    for (uint64_t skid = 0; skid <= kOptions.skid_margin; ++skid) {
      const FreeRun run = *plan_free_run({.instructions = limit}, kOptions);
      const uint64_t stopped_at = *run.instruction_period + skid;
      EXPECT_FALSE(account_free_run(run, {.instructions = stopped_at}).overshot())
          << "limit " << limit << " skid " << skid;
    }
}

TEST(FreeRunAccount, ASkidPastTheMarginIsPastTheBoundaryByTheDifference) {
  const FreeRun run = *plan_free_run({.instructions = 1000}, kOptions);
  for (uint64_t over = 1; over <= 5; ++over) {
    const FreeRunAccount a =
        account_free_run(run, {.instructions = *run.instruction_period + 128 + over});
    EXPECT_TRUE(a.overshot());
    EXPECT_EQ(a.batch.instructions, 999u) << "as much as the models allow";
    EXPECT_EQ(a.past.instructions, over);
  }
}

TEST(FreeRunAccount, BranchesPastTheBoundaryAreInstructionsPastItToo) {
  const FreeRun run = *plan_free_run({.branches = 300}, kOptions);
  const FreeRunAccount a = account_free_run(run, {.instructions = 2000, .branches = 302});
  EXPECT_TRUE(a.overshot());
  EXPECT_EQ(a.batch.branches, 299u);
  EXPECT_EQ(a.past.branches, 3u);
  EXPECT_EQ(a.batch.instructions, 1997u);
  EXPECT_EQ(a.past.instructions, 3u);
}

TEST(FreeRunAccount, ConditionalBranchesPastTheBoundaryArePastItAsBranchesAndInstructions) {
  const FreeRun run = *plan_free_run({.branches = 5000, .conditional_branches = 300}, kOptions);
  const FreeRunAccount a =
      account_free_run(run, {.instructions = 2000, .branches = 400, .conditional_branches = 302});
  EXPECT_TRUE(a.overshot());
  EXPECT_EQ(a.batch.conditional_branches, 299u);
  EXPECT_EQ(a.past.conditional_branches, 3u);
  EXPECT_EQ(a.batch.branches, 397u);
  EXPECT_EQ(a.past.branches, 3u);
  EXPECT_EQ(a.batch.instructions, 1997u);
  EXPECT_EQ(a.past.instructions, 3u);
  EXPECT_TRUE(run.allowance.admits(a.batch));
}

TEST(FreeRunAccount, ConditionalBranchesCountedWithoutBranchesStayConditional) {
  // Only conditional branches have a period: the branch counter is not armed and reads 0.
  const FreeRun run = *plan_free_run({.conditional_branches = 300}, kOptions);
  const FreeRunAccount within =
      account_free_run(run, {.instructions = 900, .conditional_branches = 250});
  EXPECT_FALSE(within.overshot());
  EXPECT_EQ(within.batch.conditional_branches, 250u);
  const FreeRunAccount past =
      account_free_run(run, {.instructions = 900, .conditional_branches = 301});
  EXPECT_TRUE(past.overshot());
  EXPECT_EQ(past.batch.conditional_branches, 299u);
  EXPECT_EQ(past.past.conditional_branches, 2u);
  EXPECT_EQ(past.past.instructions, 2u);
  EXPECT_TRUE(run.allowance.admits(past.batch));
}

TEST(FreeRunAccount, EveryKindPastTheBoundaryNestsInTheNextAndTheBatchIsAdmitted) {
  // Any counts read back, within or beyond any allowance: the batch is admitted, and what is
  // past the boundary is conditional branches within branches within instructions.
  const FreeRun run = *plan_free_run(
      {.instructions = 1000, .branches = 400, .conditional_branches = 300}, kOptions);
  for (uint64_t i : {0u, 1u, 500u, 999u, 1000u, 1003u, 2000u})
    for (uint64_t b : {0u, 1u, 399u, 400u, 405u, 1200u})
      for (uint64_t c : {0u, 1u, 299u, 300u, 302u, 700u}) {
        const FreeRunAccount a =
            account_free_run(run, {.instructions = i, .branches = b, .conditional_branches = c});
        SCOPED_TRACE(testing::Message() << i << " " << b << " " << c);
        EXPECT_TRUE(run.allowance.admits(a.batch));
        EXPECT_LE(a.batch.conditional_branches, a.batch.branches);
        EXPECT_LE(a.batch.branches, a.batch.instructions);
        EXPECT_LE(a.past.conditional_branches, a.past.branches);
        EXPECT_LE(a.past.branches, a.past.instructions);
        EXPECT_EQ(a.batch.instructions + a.past.instructions, i);
      }
}

TEST(FreeRunAccount, MoreBranchesThanInstructionsAreCountedAsInstructions) {
  const FreeRun run = *plan_free_run({.instructions = 1000, .branches = 1000}, kOptions);
  const FreeRunAccount a = account_free_run(run, {.instructions = 10, .branches = 12});
  EXPECT_FALSE(a.overshot());
  EXPECT_EQ(a.batch.branches, 10u);
}

}  // namespace
}  // namespace vmm
