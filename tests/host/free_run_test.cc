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

TEST(FreeRunAccount, MoreBranchesThanInstructionsAreCountedAsInstructions) {
  const FreeRun run = *plan_free_run({.instructions = 1000, .branches = 1000}, kOptions);
  const FreeRunAccount a = account_free_run(run, {.instructions = 10, .branches = 12});
  EXPECT_FALSE(a.overshot());
  EXPECT_EQ(a.batch.branches, 10u);
}

}  // namespace
}  // namespace vmm
