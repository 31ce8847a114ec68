// What the PMU tells a counting backend (arch_pmu.h): whether it wants instructions at all and
// at CPL 0, how many may retire before an overflow is possible, which batches of unseen
// instructions it admits, and which models (cache, predictor) its events read.
#include "tests/arch_perfmon/arch_pmu_fixture.h"

#include <stdexcept>

namespace pmu::arch_perfmon::testing {
namespace {

using BackendHints = ArchPmuTest;

TEST_F(BackendHints, NothingCountingWantsNothing) {
  EXPECT_FALSE(pmu().wants_events());
  ok(IA32_PERFEVTSEL0, 0x01D0 | USR | EN);  // an unmodelled event counts nothing
  EXPECT_FALSE(pmu().wants_events());
  EXPECT_TRUE(pmu().unseen_allowance().possible);
  ok(IA32_PERFEVTSEL0, INST_RETIRED | USR | EN);
  EXPECT_TRUE(pmu().wants_events());
  EXPECT_FALSE(pmu().wants_kernel_events());
  ok(IA32_FIXED_CTR_CTRL, fixed_field(1, 1));
  ok(IA32_PERF_GLOBAL_CTRL, 0x1 | (1ull << 33));
  EXPECT_TRUE(pmu().wants_kernel_events());
}

TEST_F(BackendHints, QuietRetirementsReachTheWrap) {
  ok(IA32_PERFEVTSEL0, BR_CONDITIONAL | USR | EN | INT);
  ok(IA32_A_PMC0, kMask48 - 99);  // the 100th conditional branch overflows
  EXPECT_EQ(pmu().quiet_retirements(), 100u);
  ok(IA32_PERFEVTSEL0 + 1, INST_RETIRED | USR | EN);
  ok(IA32_A_PMC0 + 1, kMask48 - 9);
  EXPECT_EQ(pmu().quiet_retirements(), 10u);
  ok(IA32_PERFEVTSEL0 + 2, CORE_CYCLES | USR | EN);  // one instruction may be many cycles
  EXPECT_EQ(pmu().quiet_retirements(), 1u);
  ok(IA32_PERFEVTSEL0 + 2, BR_ALL | USR | EN | cmask(1));
  EXPECT_EQ(pmu().quiet_retirements(), 1u);
  ok(IA32_PERFEVTSEL0 + 2, 0);
  EXPECT_EQ(pmu().quiet_retirements(), 10u);
  // The bound is exact: the 10th instruction overflows counter 1, not the 9th.
  for (int n = 0; n < 9; ++n) retire(insn());
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_STATUS), 0u);
  retire(insn());
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_STATUS), 0x2u);
}

TEST_F(BackendHints, UnseenBatchesOfInstructionsAndBranches) {
  ok(IA32_PERFEVTSEL0, INST_RETIRED | USR | EN | INT);
  ok(IA32_PERFEVTSEL0 + 1, BR_ALL | USR | EN | INT);
  ok(IA32_A_PMC0, kMask48 - 999);
  ok(IA32_A_PMC0 + 1, kMask48 - 99);
  ok(IA32_FIXED_CTR_CTRL, fixed_field(0, 2));
  ok(IA32_PERF_GLOBAL_CTRL, 0x3 | (1ull << 32));
  const UnseenAllowance a = pmu().unseen_allowance();
  EXPECT_TRUE(a.possible);
  EXPECT_EQ(a.instructions, 1000u);
  EXPECT_EQ(a.branches, 100u);
  pmu().retire_unseen({999, 99});
  EXPECT_EQ(rd(IA32_PMC0), kMask48);
  EXPECT_EQ(rd(IA32_PMC0 + 1), kMask48);
  EXPECT_EQ(rd(IA32_FIXED_CTR0), 999u);
  EXPECT_EQ(sink_.pmis, 0);
  EXPECT_THROW(pmu().retire_unseen({1, 1}), std::logic_error);  // the next one overflows
}

TEST_F(BackendHints, UnseenBatchesOfConditionalBranches) {
  // rr's ticks: BR_INST_RETIRED.CONDITIONAL at CPL 3 with a PMI at the wrap.
  ok(IA32_PERFEVTSEL0, BR_CONDITIONAL | USR | EN | INT);
  ok(IA32_PERFEVTSEL0 + 1, BR_ALL | USR | EN);
  ok(IA32_A_PMC0, kMask48 - 49);
  ok(IA32_A_PMC0 + 1, 7);
  const UnseenAllowance a = pmu().unseen_allowance();
  EXPECT_TRUE(a.possible);
  EXPECT_EQ(a.conditional_branches, 50u);
  EXPECT_EQ(a.branches, kMask48 - 7 + 1);
  EXPECT_EQ(a.instructions, UINT64_MAX);
  pmu().retire_unseen({.instructions = 1000, .branches = 200, .conditional_branches = 49});
  EXPECT_EQ(rd(IA32_PMC0), kMask48);
  EXPECT_EQ(rd(IA32_PMC0 + 1), 207u);
  EXPECT_EQ(sink_.pmis, 0);
  EXPECT_EQ(pmu().unseen_allowance().conditional_branches, 1u);
  EXPECT_THROW(pmu().retire_unseen({.instructions = 1, .branches = 1, .conditional_branches = 1}),
               std::logic_error);
  pmu().retire_unseen({.instructions = 5, .branches = 5});  // other branches: no wrap
  EXPECT_EQ(rd(IA32_PMC0 + 1), 212u);
}

TEST_F(BackendHints, WhatNeedsEachInstruction) {
  for (uint64_t sel :
       {BR_NEAR_TAKEN | USR | EN, INST_RETIRED | USR | OS | EN, INST_RETIRED | USR | EN | cmask(1),
        CORE_CYCLES | USR | EN, LLC_MISS | USR | EN}) {
    ok(IA32_PERFEVTSEL0, sel);
    EXPECT_FALSE(pmu().unseen_allowance().possible) << std::hex << sel;
  }
  ok(IA32_PERFEVTSEL0, LLC_MISS | USR | EN);
  EXPECT_TRUE(pmu().reads_cache_model());
  EXPECT_FALSE(pmu().reads_branch_predictions());
  ok(IA32_PERFEVTSEL0, BR_MISP | USR | EN);
  EXPECT_FALSE(pmu().reads_cache_model());
  EXPECT_TRUE(pmu().reads_branch_predictions());
  ok(IA32_PERFEVTSEL0, 0);
  ok(IA32_FIXED_CTR_CTRL, fixed_field(1, 2));  // core cycles grow with cache latencies
  ok(IA32_PERF_GLOBAL_CTRL, 1ull << 33);
  EXPECT_TRUE(pmu().reads_cache_model());
}

}  // namespace
}  // namespace pmu::arch_perfmon::testing
