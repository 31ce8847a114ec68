// CCCR Cascade: a counter whose Cascade flag is set counts while its alternate's OVF is set.
#include "tests/netburst/netburst_fixture.h"

namespace pmu::netburst::testing {
namespace {

using NetburstCascade = NetburstTest;

const uint64_t kInstrUser = MakeEscr(kInstrRetired, 1, false, true);

TEST_F(NetburstCascade, CascadedCounterStartsAfterItsAlternateOverflows) {
  // SDM example: X (IQ_COUNTER0) counts 5 events, then Y (IQ_COUNTER2, Cascade, Enable clear)
  // starts.
  Program(kIqCounter0, kCruEscr0, kInstrUser, MakeCccr(kSelCru01), static_cast<uint64_t>(-5));
  Program(kIqCounter2, kCruEscr1, kInstrUser, (MakeCccr(kSelCru01) & ~kEnable) | kCascade);
  EXPECT_TRUE(pmu.wants_events());
  Run(Plain(), 5);  // the 5th overflows X; Y starts with the next instruction
  EXPECT_EQ(Count(kIqCounter2), 0u);
  EXPECT_TRUE(pmu.counter_view(kIqCounter2).counting);
  Run(Plain(), 7);
  EXPECT_EQ(Count(kIqCounter2), 7u);
  EXPECT_EQ(Count(kIqCounter0), 7u);
}

TEST_F(NetburstCascade, ClearingTheAlternatesOvfStopsTheCascadedCounter) {
  Program(kBpuCounter1, kFsbEscr0, MakeEscr(kGlobalPower, 1, true, true), MakeCccr(kSelFsb),
          kCounterMask);
  Program(kBpuCounter3, kFsbEscr1, MakeEscr(kGlobalPower, 1, true, true),
          (MakeCccr(kSelFsb) & ~kEnable) | kCascade);
  Run(Plain(3, 2));
  Run(Plain(3, 4));
  EXPECT_EQ(Count(kBpuCounter3), 4u);
  Wr(kCccr(kBpuCounter1), MakeCccr(kSelFsb));  // OVF cleared
  Run(Plain(3, 4));
  EXPECT_EQ(Count(kBpuCounter3), 4u);
  EXPECT_FALSE(pmu.counter_view(kBpuCounter3).counting);
}

TEST_F(NetburstCascade, CascadeWithoutAlternateOverflowIsIdle) {
  Program(kIqCounter2, kCruEscr1, kInstrUser, (MakeCccr(kSelCru01) & ~kEnable) | kCascade);
  EXPECT_FALSE(pmu.wants_events());
  Run(Plain(), 10);
  EXPECT_EQ(Count(kIqCounter2), 0u);
  // Software may set the alternate's OVF itself: that starts the cascaded counter too.
  Wr(kCccr(kIqCounter0), (MakeCccr(kSelCru01) & ~kEnable) | kOvf);
  EXPECT_TRUE(pmu.wants_events());
  Run(Plain(), 10);
  EXPECT_EQ(Count(kIqCounter2), 10u);
}

TEST_F(NetburstCascade, Counters16And17HaveNoAlternate) {
  Wr(kCccr(kIqCounter0), (MakeCccr(kSelCru01) & ~kEnable) | kOvf);
  Wr(kCccr(kIqCounter2), (MakeCccr(kSelCru01) & ~kEnable) | kOvf);
  Program(kIqCounter4, kCruEscr0, kInstrUser, (MakeCccr(kSelCru01) & ~kEnable) | kCascade);
  Program(kIqCounter5, kCruEscr1, kInstrUser, (MakeCccr(kSelCru01) & ~kEnable) | kCascade);
  Run(Plain(), 10);
  EXPECT_EQ(Count(kIqCounter4), 0u);
  EXPECT_EQ(Count(kIqCounter5), 0u);
}

TEST_F(NetburstCascade, CascadedCounterRaisesItsOwnPmi) {
  Program(kIqCounter1, kCruEscr0, kInstrUser, MakeCccr(kSelCru01), kCounterMask);
  Program(kIqCounter3, kCruEscr1, kInstrUser,
          (MakeCccr(kSelCru01, kOvfPmiT0) & ~kEnable) | kCascade, kCounterMask - 1);
  Run(Plain());  // IQ_COUNTER1 overflows
  Run(Plain());  // IQ_COUNTER3 counts 1
  EXPECT_EQ(sink.pmis, 0);
  Run(Plain());  // ...and wraps on the 2nd: the PMI comes with it (default timing)
  EXPECT_EQ(sink.pmis, 1);
  Run(Plain(), 5);
  EXPECT_EQ(sink.pmis, 1);
}

}  // namespace
}  // namespace pmu::netburst::testing
