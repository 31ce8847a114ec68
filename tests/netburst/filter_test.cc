// CCCR Compare / Complement / Threshold / Edge, per cycle.
#include "pmu/netburst/filter.h"
#include "tests/netburst/netburst_fixture.h"

namespace pmu::netburst::testing {
namespace {

TEST(NetburstFilter, WithoutCompareEveryOccurrenceIsAnIncrement) {
  bool prev = false;
  EXPECT_EQ(filtered_increments({}, {4, 1, 1}, prev), 5u);
  EXPECT_EQ(filtered_increments({}, {4, 0, 2}, prev), 2u);
  // Edge without Compare is inactive.
  FilterConfig edge_only;
  edge_only.edge = true;
  EXPECT_EQ(filtered_increments(edge_only, {0, 0, 2}, prev), 2u);
}

TEST(NetburstFilter, CompareCountsCyclesAboveThresholdComplementAtOrBelow) {
  bool prev = false;
  FilterConfig gt{true, false, false, 1};
  EXPECT_EQ(filtered_increments(gt, {9, 0, 2}, prev), 1u);  // only the cycle with 2 > 1
  EXPECT_EQ(filtered_increments(gt, {9, 0, 1}, prev), 0u);
  FilterConfig le{true, true, false, 1};
  EXPECT_EQ(filtered_increments(le, {9, 0, 2}, prev), 9u);  // 9 cycles with 0 <= 1
  EXPECT_EQ(filtered_increments(le, {9, 0, 1}, prev), 10u);
}

TEST(NetburstFilter, EdgeCountsRisingTransitionsAcrossCalls) {
  bool prev = false;
  FilterConfig e{true, false, true, 0};
  EXPECT_EQ(filtered_increments(e, {0, 0, 1}, prev), 1u);  // false -> true
  EXPECT_EQ(filtered_increments(e, {0, 0, 1}, prev), 0u);  // stays true
  EXPECT_EQ(filtered_increments(e, {3, 0, 1}, prev), 1u);  // falls in the busy cycles, rises
  EXPECT_TRUE(prev);
  EXPECT_EQ(filtered_increments(e, {2, 1, 1}, prev), 0u);  // RUNNING-like: true throughout
  EXPECT_EQ(filtered_increments(e, {0, 0, 0}, prev), 0u);
  EXPECT_FALSE(prev);
}

using NetburstCompare = NetburstTest;

// Instructions of 1, 3, 1, 5 cycles at CPL 3: 4 retirement cycles, 6 stall cycles.
void RunFour(NetburstPmu& pmu) {
  for (uint32_t cycles : {1u, 3u, 1u, 5u}) pmu.retire(Plain(3, cycles));
}

TEST_F(NetburstCompare, InstrRetiredCompareThresholdZeroCountsRetiringCycles) {
  Program(kIqCounter0, kCruEscr0, MakeEscr(kInstrRetired, 1, true, true),
          MakeCccr(kSelCru01, kCompare | Threshold(0)));
  RunFour(pmu);
  EXPECT_EQ(Count(kIqCounter0), 4u);
}

TEST_F(NetburstCompare, ComplementThresholdZeroCountsCyclesWithoutRetirement) {
  Program(kIqCounter0, kCruEscr0, MakeEscr(kInstrRetired, 1, true, true),
          MakeCccr(kSelCru01, kCompare | kComplement | Threshold(0)));
  RunFour(pmu);
  EXPECT_EQ(Count(kIqCounter0), 6u);
}

TEST_F(NetburstCompare, ComplementThreshold15CountsEveryCycle) {
  Program(kIqCounter0, kCruEscr0, MakeEscr(kInstrRetired, 1, true, true),
          MakeCccr(kSelCru01, kCompare | kComplement | Threshold(15)));
  RunFour(pmu);
  EXPECT_EQ(Count(kIqCounter0), 10u);
}

TEST_F(NetburstCompare, DisqualifiedCplGivesZeroInputSoComplementStillCountsItsCycles) {
  // T0_USR only; a 4-cycle kernel instruction has 0 occurrences in each cycle.
  Program(kIqCounter0, kCruEscr0, MakeEscr(kInstrRetired, 1, false, true),
          MakeCccr(kSelCru01, kCompare | kComplement | Threshold(0)));
  Run(Plain(0, 4));
  EXPECT_EQ(Count(kIqCounter0), 4u);
}

TEST_F(NetburstCompare, ThresholdOnBsqSeparatesOneMissFromTwo) {
  Program(kBpuCounter0, kBsuEscr0, MakeEscr(kBsqCacheRef, 0x100, true, true),
          MakeCccr(kSelBsu, kCompare | Threshold(1)));
  Run(Load({DataSource::kDram}));
  Run(Load({DataSource::kDram, DataSource::kDram}));
  Run(Load({DataSource::kDram, DataSource::kDram}));
  EXPECT_EQ(Count(kBpuCounter0), 2u);
}

TEST_F(NetburstCompare, EdgeCountsBurstsOfRetirement) {
  // Bursts: instructions of 1 cycle retire back to back (comparison true every cycle); a
  // multi-cycle instruction breaks the burst with stall cycles.
  Program(kIqCounter0, kCruEscr0, MakeEscr(kInstrRetired, 1, true, true),
          MakeCccr(kSelCru01, kCompare | kEdge | Threshold(0)));
  for (uint32_t cycles : {1u, 1u, 1u, 4u, 1u, 1u, 2u, 3u}) Run(Plain(3, cycles));
  // Rising edges: the first cycle, after the stall of the 4-cycle one, of the 2-cycle one, of
  // the 3-cycle one.
  EXPECT_EQ(Count(kIqCounter0), 4u);
}

TEST_F(NetburstCompare, EdgeWithGlobalPowerCountsOnceWhileRunning) {
  Program(kBpuCounter1, kFsbEscr0, MakeEscr(kGlobalPower, 1, false, true),
          MakeCccr(kSelFsb, kCompare | kEdge | Threshold(0)));
  Run(Plain(3, 10), 3);
  EXPECT_EQ(Count(kBpuCounter1), 1u);
  Run(Plain(0, 10));  // kernel: not counted, comparison false
  Run(Plain(3, 10));  // rises again
  EXPECT_EQ(Count(kBpuCounter1), 2u);
}

TEST_F(NetburstCompare, CccrWriteResetsTheEdgeDetector) {
  Program(kIqCounter0, kCruEscr0, MakeEscr(kInstrRetired, 1, true, true),
          MakeCccr(kSelCru01, kCompare | kEdge | Threshold(0)));
  Run(Plain());
  Run(Plain());
  EXPECT_EQ(Count(kIqCounter0), 1u);
  Wr(kCccr(kIqCounter0), MakeCccr(kSelCru01, kCompare | kEdge | Threshold(0)));
  Run(Plain());
  EXPECT_EQ(Count(kIqCounter0), 2u);
}

TEST_F(NetburstCompare, ThresholdIgnoredWithoutCompare) {
  Program(kIqCounter0, kCruEscr0, MakeEscr(kInstrRetired, 1, true, true),
          MakeCccr(kSelCru01, Threshold(7) | kComplement));
  RunFour(pmu);
  EXPECT_EQ(Count(kIqCounter0), 4u);
}

}  // namespace
}  // namespace pmu::netburst::testing
