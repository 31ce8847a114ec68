// What the counters count (events.h, arch_pmu.h "Counting"): each modelled event, the privilege
// filters, GLOBAL_CTRL, CMASK/INV/EDGE per cycle, overflow and its zero-skid PMI, freezing.
#include "tests/arch_perfmon/arch_pmu_fixture.h"

namespace pmu::arch_perfmon::testing {
namespace {

using Counting = ArchPmuTest;

TEST_F(Counting, InstructionsAtTheSelectedPrivilegeLevels) {
  ok(IA32_PERFEVTSEL0, INST_RETIRED | USR | EN);
  ok(IA32_PERFEVTSEL0 + 1, INST_RETIRED | OS | EN);
  ok(IA32_PERFEVTSEL0 + 2, INST_RETIRED | USR | OS | EN);
  ok(IA32_PERFEVTSEL0 + 3, INST_RETIRED | USR);  // not enabled
  retire(insn(3), 5);
  retire(insn(0), 2);
  retire(insn(1), 1);  // USR is CPL 1-3
  EXPECT_EQ(rd(IA32_PMC0), 6u);
  EXPECT_EQ(rd(IA32_PMC0 + 1), 2u);
  EXPECT_EQ(rd(IA32_PMC0 + 2), 8u);
  EXPECT_EQ(rd(IA32_PMC0 + 3), 0u);
}

TEST_F(Counting, GlobalControlGatesEachCounter) {
  ok(IA32_PERFEVTSEL0, INST_RETIRED | USR | EN);
  ok(IA32_PERFEVTSEL0 + 1, INST_RETIRED | USR | EN);
  ok(IA32_PERF_GLOBAL_CTRL, 0x2);
  retire(insn(), 3);
  EXPECT_EQ(rd(IA32_PMC0), 0u);
  EXPECT_EQ(rd(IA32_PMC0 + 1), 3u);
  ok(IA32_PERF_GLOBAL_CTRL, 0);
  EXPECT_FALSE(pmu().wants_events());
  retire(insn(), 3);
  EXPECT_EQ(rd(IA32_PMC0 + 1), 3u);
}

TEST_F(Counting, BranchEvents) {
  const uint64_t sel[] = {BR_ALL, BR_CONDITIONAL, BR_NEAR_CALL, BR_NEAR_RETURN, BR_NEAR_TAKEN};
  for (int x = 0; x < 5; ++x) ok(IA32_PERFEVTSEL0 + x, sel[x] | USR | EN);
  retire(insn());                                      // not a branch
  retire(branch(BranchKind::kConditional, true));      // Jcc taken
  retire(branch(BranchKind::kConditional, false), 2);  // Jcc not taken
  retire(branch(BranchKind::kDirectJump));             // JMP
  retire(branch(BranchKind::kIndirectJump));           // JMP r/m
  retire(branch(BranchKind::kCall), 3);
  retire(branch(BranchKind::kReturn), 2);
  EXPECT_EQ(rd(IA32_PMC0), 10u);     // all branches
  EXPECT_EQ(rd(IA32_PMC0 + 1), 3u);  // conditional only (rr's ticks)
  EXPECT_EQ(rd(IA32_PMC0 + 2), 3u);  // near calls
  EXPECT_EQ(rd(IA32_PMC0 + 3), 2u);  // near returns
  EXPECT_EQ(rd(IA32_PMC0 + 4), 8u);  // taken: all but the two untaken Jcc
}

// MEM_INST_RETIRED.ALL_LOADS / ALL_STORES: one per retired instruction that reads / writes data
// memory, however many operands it has (a read-modify-write counts in both).
TEST_F(Counting, MemoryInstructionsRetired) {
  ok(IA32_PERFEVTSEL0, MEM_INST_ALL_LOADS | USR | EN);
  ok(IA32_PERFEVTSEL0 + 1, MEM_INST_ALL_STORES | USR | EN);
  RetiredInstruction load = insn(), store = insn(), both = insn();
  load.loads = true;
  store.stores = true;
  both.loads = both.stores = true;
  retire(insn(), 2);  // registers only
  retire(load, 3);
  retire(store, 2);
  retire(both);
  RetiredInstruction kernel_load = load;
  kernel_load.cpl = 0;
  retire(kernel_load);  // USR only
  EXPECT_EQ(rd(IA32_PMC0), 4u);
  EXPECT_EQ(rd(IA32_PMC0 + 1), 3u);
  EXPECT_FALSE(pmu().reads_cache_model()) << "what the decoder says, not the cache model";
}

TEST_F(Counting, MispredictionsOnlyWhereThePredictorSpoke) {
  ok(IA32_PERFEVTSEL0, BR_MISP | USR | EN);
  RetiredInstruction b = branch(BranchKind::kConditional);
  retire(b);  // no prediction reported
  b.branch.prediction_valid = true;
  b.branch.predicted_correctly = true;
  retire(b);
  b.branch.predicted_correctly = false;
  retire(b, 2);
  EXPECT_EQ(rd(IA32_PMC0), 2u);
  EXPECT_TRUE(pmu().reads_branch_predictions());
}

TEST_F(Counting, LastLevelCacheEvents) {
  ok(IA32_PERFEVTSEL0, LLC_REFERENCE | USR | EN);
  ok(IA32_PERFEVTSEL0 + 1, LLC_MISS | USR | EN);
  RetiredInstruction i = insn();
  i.cache_miss_count = 2;
  i.cache_misses[0].source = DataSource::kL2;       // an L1 miss the L2 served: no LLC access
  i.cache_misses[1].source = DataSource::kLocalL3;  // L3 hit
  retire(i);
  i.cache_misses[0].source = DataSource::kDram;  // L3 miss
  retire(i);
  EXPECT_EQ(rd(IA32_PMC0), 3u);
  EXPECT_EQ(rd(IA32_PMC0 + 1), 1u);
  // Without an L3 the L2 is the last level: every L1 miss references it.
  make(Config{.third_level_cache = false});
  ok(IA32_PERFEVTSEL0, LLC_REFERENCE | USR | EN);
  ok(IA32_PERFEVTSEL0 + 1, LLC_MISS | USR | EN);
  i.cache_misses[0].source = DataSource::kL2;    // an L2 (last level) hit
  i.cache_misses[1].source = DataSource::kDram;  // an L2 miss
  retire(i);
  EXPECT_EQ(rd(IA32_PMC0), 2u);
  EXPECT_EQ(rd(IA32_PMC0 + 1), 1u);
}

TEST_F(Counting, CyclesAndUnmodelledEvents) {
  ok(IA32_PERFEVTSEL0, CORE_CYCLES | USR | OS | EN);
  ok(IA32_PERFEVTSEL0 + 1, REF_CYCLES | USR | OS | EN);
  ok(IA32_PERFEVTSEL0 + 2, 0x01D0 | USR | EN);  // MEM_INST_RETIRED: not modelled
  retire(insn(3, 4));
  retire(insn(0, 0));  // a report of 0 cycles is 1
  EXPECT_EQ(rd(IA32_PMC0), 5u);
  EXPECT_EQ(rd(IA32_PMC0 + 1), 5u);
  EXPECT_EQ(rd(IA32_PMC0 + 2), 0u);
  EXPECT_EQ(pmu().counter_event(2), Event::kUnmodelled);
}

TEST_F(Counting, CounterMaskInvertAndEdgePerCycle) {
  // Instructions: in the last of each instruction's cycles one occurrence, none before.
  ok(IA32_PERFEVTSEL0, INST_RETIRED | USR | EN | cmask(1));             // cycles retiring >= 1
  ok(IA32_PERFEVTSEL0 + 1, INST_RETIRED | USR | EN | cmask(1) | INV);   // cycles retiring none
  ok(IA32_PERFEVTSEL0 + 2, INST_RETIRED | USR | EN | cmask(2));         // never 2 in a cycle
  ok(IA32_PERFEVTSEL0 + 3, INST_RETIRED | USR | EN | cmask(1) | EDGE);  // rising edges
  ok(IA32_PERFEVTSEL0 + 4, CORE_CYCLES | USR | EN | cmask(1) | EDGE);   // always true: one edge
  ok(IA32_PERFEVTSEL0 + 5, INST_RETIRED | USR | EN | INV);  // INV without CMASK: no effect
  retire(insn(3, 3));
  retire(insn(3, 1));
  retire(insn(3, 1));
  retire(insn(3, 4));
  EXPECT_EQ(rd(IA32_PMC0), 4u);
  EXPECT_EQ(rd(IA32_PMC0 + 1), 5u);  // 2 + 0 + 0 + 3 busy cycles
  EXPECT_EQ(rd(IA32_PMC0 + 2), 0u);
  // Edges: busy-busy-retire | retire | retire | busy x3 retire: rising at the 1st, 4th's end.
  EXPECT_EQ(rd(IA32_PMC0 + 3), 2u);
  EXPECT_EQ(rd(IA32_PMC0 + 4), 1u);
  EXPECT_EQ(rd(IA32_PMC0 + 5), 4u);
  // Writing the select forgets the previous cycle: a true first cycle is a rising edge.
  ok(IA32_PERFEVTSEL0 + 4, CORE_CYCLES | USR | EN | cmask(1) | EDGE);
  retire(insn(3, 2));
  EXPECT_EQ(rd(IA32_PMC0 + 4), 2u);
}

// USR and OS say at which levels the condition is counted (SDM "IA32_PERFEVTSELx"): at the others
// the counter stands still, also where INV makes a cycle without occurrences pass. Linux's
// cycles:pp is such an encoding (INST_RETIRED.ANY_P, INV, CMASK 16: every cycle) at CPL 3 only.
TEST_F(Counting, CyclesWithoutOccurrencesCountOnlyAtTheQualifiedLevels) {
  ok(IA32_PERFEVTSEL0, INST_RETIRED | USR | EN | cmask(16) | INV);
  ok(IA32_PERFEVTSEL0 + 1, INST_RETIRED | OS | EN | cmask(16) | INV);
  ok(IA32_PERFEVTSEL0 + 2, INST_RETIRED | USR | OS | EN | cmask(16) | INV);
  retire(insn(3, 3));
  retire(insn(0, 5));
  retire(insn(3, 1));
  EXPECT_EQ(rd(IA32_PMC0), 4u) << "the user instructions' cycles";
  EXPECT_EQ(rd(IA32_PMC0 + 1), 5u) << "the kernel instruction's";
  EXPECT_EQ(rd(IA32_PMC0 + 2), 9u);
  // cycles:ppp: INST_RETIRED.PREC_DIST (umask 01), the same count.
  ok(IA32_PERFEVTSEL0 + 3, INST_RETIRED | 0x0100 | USR | EN | cmask(16) | INV);
  retire(insn(3, 6));
  EXPECT_EQ(rd(IA32_PMC0 + 3), 6u);
  EXPECT_EQ(pmu().counter_event(3), Event::kInstructions);
}

TEST_F(Counting, OverflowRaisesItsPmiOnTheNthEventExactly) {
  ok(IA32_PERFEVTSEL0, INST_RETIRED | USR | EN | INT);
  ok(IA32_PMC0, static_cast<uint32_t>(-5));  // -5 as a 32-bit write
  std::vector<uint64_t> at;
  pmu().set_pmi_observer([&](int bit, uint64_t rip, uint8_t) {
    EXPECT_EQ(bit, 0) << "PMC0's";
    at.push_back(rip);
  });
  for (uint64_t n = 1; n <= 5; ++n) {
    RetiredInstruction i = insn();
    i.rip = 0x1000 + n;
    retire(i);
    EXPECT_EQ(sink_.pmis, n == 5 ? 1 : 0) << n;
  }
  EXPECT_EQ(at, std::vector<uint64_t>{0x1005});
  EXPECT_EQ(rd(IA32_PMC0), 0u);
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_STATUS), 1u);
  retire(insn(), 3);  // counting goes on from 0; the status bit stays until reset
  EXPECT_EQ(rd(IA32_PMC0), 3u);
  EXPECT_EQ(sink_.pmis, 1);
  ok(IA32_PERF_GLOBAL_STATUS_RESET, 1);
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_STATUS), 0u);
}

TEST_F(Counting, OneInstructionOnePmiHoweverManyOverflow) {
  ok(IA32_PERFEVTSEL0, INST_RETIRED | USR | EN | INT);
  ok(IA32_PERFEVTSEL0 + 1, BR_ALL | USR | EN | INT);
  ok(IA32_PERFEVTSEL0 + 2, BR_ALL | USR | EN);  // overflows without INT: status only
  ok(IA32_A_PMC0, kMask48);
  ok(IA32_A_PMC0 + 1, kMask48);
  ok(IA32_A_PMC0 + 2, kMask48);
  retire(branch(BranchKind::kCall));
  EXPECT_EQ(sink_.pmis, 1);
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_STATUS), 0x7u);
  EXPECT_EQ(pmu().stats().overflows, 3u);
}

TEST_F(Counting, FixedCounters) {
  ok(IA32_FIXED_CTR_CTRL, fixed_field(0, 2) | fixed_field(1, 3) | fixed_field(2, 1 | 8));
  ok(IA32_PERF_GLOBAL_CTRL, 0x700000000ull);
  ok(IA32_FIXED_CTR0 + 2, kMask48 - 2);  // ref cycles at CPL 0, 3 to overflow
  retire(insn(3, 2), 2);
  retire(insn(0, 3));
  EXPECT_EQ(rd(IA32_FIXED_CTR0), 2u);      // instructions at USR
  EXPECT_EQ(rd(IA32_FIXED_CTR0 + 1), 7u);  // cycles at every level
  EXPECT_EQ(rd(IA32_FIXED_CTR0 + 2), 0u);  // 3 cycles at CPL 0: wrapped
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_STATUS), 1ull << 34);
  EXPECT_EQ(sink_.pmis, 1);
  ok(IA32_PERF_GLOBAL_CTRL, 0x300000000ull);  // fixed 2 off globally
  retire(insn(0, 3));
  EXPECT_EQ(rd(IA32_FIXED_CTR0 + 2), 0u);
}

TEST_F(Counting, FreezePerfmonOnPmiVersion4) {
  pmu().set_debugctl((1ull << 12) | (1ull << 11));
  ok(IA32_PERFEVTSEL0, INST_RETIRED | USR | EN | INT);
  ok(IA32_PERFEVTSEL0 + 1, INST_RETIRED | USR | EN);
  ok(IA32_PMC0, static_cast<uint32_t>(-2));
  retire(insn(), 2);
  EXPECT_EQ(sink_.pmis, 1);
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_STATUS), 1ull | (1ull << 58) | (1ull << 59));
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_CTRL), 0xFFu) << "version 4 leaves GLOBAL_CTRL alone";
  EXPECT_EQ(rd(IA32_PMC0 + 1), 2u) << "the overflowing instruction itself still counted";
  retire(insn(), 4);
  EXPECT_EQ(rd(IA32_PMC0 + 1), 2u) << "frozen";
  EXPECT_FALSE(pmu().wants_events());
  ok(IA32_PERF_GLOBAL_STATUS_RESET, 1ull | (1ull << 58) | (1ull << 59));  // the PMI's ack
  retire(insn());
  EXPECT_EQ(rd(IA32_PMC0 + 1), 3u);
}

TEST_F(Counting, LegacyFreezeClearsGlobalControl) {
  make(Config{.version = 3});
  pmu().set_debugctl(1ull << 12);
  ok(IA32_PERFEVTSEL0, INST_RETIRED | USR | EN | INT);
  ok(IA32_PMC0, static_cast<uint32_t>(-1));
  retire(insn());
  EXPECT_EQ(sink_.pmis, 1);
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_CTRL), 0u);
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_STATUS), 1u) << "no CTR_Frz before version 4";
}

}  // namespace
}  // namespace pmu::arch_perfmon::testing
