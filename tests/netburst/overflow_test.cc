// 40-bit wrap, the sticky OVF flag, FORCE_OVF and overflow PMIs (both timings).
#include <vector>

#include "tests/netburst/netburst_fixture.h"

namespace pmu::netburst::testing {
namespace {

// These cases follow the SDM's timing (PMI with the next event count); NetburstAtOverflow below
// covers the default.
class NetburstOverflow : public NetburstTest {
 protected:
  NetburstOverflow() : NetburstTest(SdmPmiTimingConfig()) {}
};

TEST(NetburstConfig, DefaultPmiTimingIsTheSeedsAtOverflow) {
  EXPECT_EQ(Config{}.pmi_timing, PmiTiming::kAtOverflow);
}

const uint64_t kInstrUser = MakeEscr(kInstrRetired, 1, false, true);

TEST_F(NetburstOverflow, CounterWrapsAt40BitsAndSetsOvf) {
  Program(kIqCounter0, kCruEscr0, kInstrUser, MakeCccr(kSelCru01), kCounterMask - 2);
  Run(Plain(), 2);
  EXPECT_EQ(Count(kIqCounter0), kCounterMask);
  EXPECT_EQ(Rd(kCccr(kIqCounter0)) & kOvf, 0u);
  Run(Plain());
  EXPECT_EQ(Count(kIqCounter0), 0u);
  EXPECT_NE(Rd(kCccr(kIqCounter0)) & kOvf, 0u);
  Run(Plain(), 5);
  EXPECT_EQ(Count(kIqCounter0), 5u) << "counting continues after the wrap";
  EXPECT_EQ(sink.pmis, 0) << "no OVF_PMI_T0, no interrupt";
}

TEST_F(NetburstOverflow, OvfIsStickyUntilSoftwareWritesZero) {
  Program(kIqCounter0, kCruEscr0, kInstrUser, MakeCccr(kSelCru01), kCounterMask);
  Run(Plain());
  ASSERT_NE(Rd(kCccr(kIqCounter0)) & kOvf, 0u);
  Run(Plain(), 100);
  Wr(kCounter(kIqCounter0), 0);  // writing the counter does not clear OVF
  Wr(kCruEscr0, kInstrUser);     // nor does writing the ESCR
  EXPECT_NE(Rd(kCccr(kIqCounter0)) & kOvf, 0u);
  Wr(kCccr(kIqCounter0), Rd(kCccr(kIqCounter0)));  // writing it back as 1 keeps it
  EXPECT_NE(Rd(kCccr(kIqCounter0)) & kOvf, 0u);
  Wr(kCccr(kIqCounter0), Rd(kCccr(kIqCounter0)) & ~kOvf);
  EXPECT_EQ(Rd(kCccr(kIqCounter0)) & kOvf, 0u);
  Run(Plain(), 10);
  EXPECT_EQ(Rd(kCccr(kIqCounter0)) & kOvf, 0u);
  EXPECT_EQ(Count(kIqCounter0), 10u);
}

TEST_F(NetburstOverflow, PmiComesWithTheNextEventCountAfterTheOverflow) {
  // SDM: preset -N+1 to get the interrupt on the Nth event.
  Program(kIqCounter0, kCruEscr0, kInstrUser, MakeCccr(kSelCru01, kOvfPmiT0),
          static_cast<uint64_t>(-99));
  Run(Plain(), 99);
  EXPECT_EQ(Count(kIqCounter0), 0u);
  EXPECT_NE(Rd(kCccr(kIqCounter0)) & kOvf, 0u);
  EXPECT_EQ(sink.pmis, 0) << "overflowed, interrupt not yet generated";
  Run(Plain(0));  // a kernel instruction is not an event of this counter
  EXPECT_EQ(sink.pmis, 0);
  Run(Plain());  // the 100th event
  EXPECT_EQ(sink.pmis, 1);
  Run(Plain(), 1000);
  EXPECT_EQ(sink.pmis, 1) << "one PMI per overflow";
  EXPECT_EQ(pmu.stats().overflows, 1u);
}

TEST_F(NetburstOverflow, ThePmiObserverSeesEachPmiWithItsCounterAndInstruction) {
  struct Seen {
    int counter;
    uint64_t rip;
    uint8_t cpl;
  };
  std::vector<Seen> seen;
  pmu.set_pmi_observer([&](int counter, uint64_t rip, uint8_t cpl) {
    seen.push_back({counter, rip, cpl});
  });
  Program(kIqCounter0, kCruEscr0, kInstrUser, MakeCccr(kSelCru01, kOvfPmiT0),
          static_cast<uint64_t>(-99));
  Run(Plain(), 99);
  EXPECT_TRUE(seen.empty()) << "overflowed; the PMI comes with the next event";
  RetiredInstruction hundredth = Plain();
  hundredth.rip = 0x401234;
  Run(hundredth);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(sink.pmis, 1);
  EXPECT_EQ(seen[0].counter, kIqCounter0);
  EXPECT_EQ(seen[0].rip, 0x401234u);
  EXPECT_EQ(seen[0].cpl, 3);
  Run(Plain(), 1000);
  EXPECT_EQ(seen.size(), 1u) << "one per PMI";
}

TEST_F(NetburstOverflow, OverflowInsideOneInstructionsCyclesRaisesAtOnce) {
  // RUNNING over a 10-cycle instruction: wrap at the 3rd cycle, next count at the 4th.
  Program(kBpuCounter0, kFsbEscr0, MakeEscr(kGlobalPower, 1, true, true),
          MakeCccr(kSelFsb, kOvfPmiT0), kCounterMask - 2);
  Run(Plain(3, 10));
  EXPECT_EQ(Count(kBpuCounter0), 7u);
  EXPECT_EQ(sink.pmis, 1);
}

class NetburstAtOverflow : public NetburstTest {
 protected:
  NetburstAtOverflow() : NetburstTest(MakeConfig()) {}
  static Config MakeConfig() {
    Config c;
    c.pmi_timing = PmiTiming::kAtOverflow;
    return c;
  }
};

TEST_F(NetburstAtOverflow, PmiAtTheOverflowingIncrementWhenConfigured) {
  Program(kIqCounter0, kCruEscr0, kInstrUser, MakeCccr(kSelCru01, kOvfPmiT0),
          static_cast<uint64_t>(-100));
  Run(Plain(), 99);
  EXPECT_EQ(sink.pmis, 0);
  Run(Plain());
  EXPECT_EQ(sink.pmis, 1);
  Run(Plain(), 50);
  EXPECT_EQ(sink.pmis, 1);
}

TEST_F(NetburstOverflow, SamplingLoopGetsOnePmiPerPeriod) {
  // The bundled kernel's handler: on each PMI clear OVF and reload the preset. With the SDM
  // preset -(N-1) every Nth event interrupts.
  const uint64_t preset = static_cast<uint64_t>(-(1000 - 1)) & kCounterMask;
  Program(kIqCounter0, kCruEscr0, kInstrUser, MakeCccr(kSelCru01, kOvfPmiT0), preset);
  int handled = 0;
  for (int i = 0; i < 10000; ++i) {
    Run(Plain());
    if (sink.pmis > handled) {
      ++handled;
      EXPECT_NE(Rd(kCccr(kIqCounter0)) & kOvf, 0u);
      Wr(kCccr(kIqCounter0), Rd(kCccr(kIqCounter0)) & ~kOvf);
      Wr(kCounter(kIqCounter0), preset);
    }
  }
  EXPECT_EQ(sink.pmis, 10);
}

TEST_F(NetburstOverflow, PmiCancelledWhenOvfPmiT0ClearedBeforeTheNextEvent) {
  Program(kIqCounter0, kCruEscr0, kInstrUser, MakeCccr(kSelCru01, kOvfPmiT0), kCounterMask);
  Run(Plain());
  EXPECT_EQ(sink.pmis, 0);
  Wr(kCccr(kIqCounter0), MakeCccr(kSelCru01) | kOvf);
  Run(Plain(), 3);
  EXPECT_EQ(sink.pmis, 0);
}

TEST_F(NetburstOverflow, ArmedPmiWaitsWhileTheCounterIsStopped) {
  Program(kIqCounter0, kCruEscr0, kInstrUser, MakeCccr(kSelCru01, kOvfPmiT0), kCounterMask);
  Run(Plain());
  Wr(kCccr(kIqCounter0), (MakeCccr(kSelCru01, kOvfPmiT0) | kOvf) & ~kEnable);
  Run(Plain(), 5);
  EXPECT_EQ(sink.pmis, 0);
  Wr(kCccr(kIqCounter0), MakeCccr(kSelCru01, kOvfPmiT0) | kOvf);
  Run(Plain());
  EXPECT_EQ(sink.pmis, 1);
}

TEST_F(NetburstOverflow, OvfPmiT1NeverInterrupts) {
  Program(kIqCounter0, kCruEscr0, kInstrUser, MakeCccr(kSelCru01, kOvfPmiT1), kCounterMask);
  Run(Plain(), 5);
  EXPECT_NE(Rd(kCccr(kIqCounter0)) & kOvf, 0u);
  EXPECT_EQ(sink.pmis, 0);
}

TEST_F(NetburstOverflow, ForceOvfOverflowsOnEveryIncrement) {
  Program(kIqCounter0, kCruEscr0, kInstrUser, MakeCccr(kSelCru01, kForceOvf | kOvfPmiT0), 10);
  Run(Plain());
  EXPECT_EQ(Count(kIqCounter0), 11u) << "the value still counts normally";
  EXPECT_NE(Rd(kCccr(kIqCounter0)) & kOvf, 0u);
  EXPECT_EQ(sink.pmis, 0) << "the PMI comes with the next count";
  Run(Plain());
  EXPECT_EQ(sink.pmis, 1);
  Run(Plain(), 3);
  EXPECT_EQ(sink.pmis, 4);
  Run(Plain(0), 3);  // no increments, no overflow, no PMI
  EXPECT_EQ(sink.pmis, 4);
  EXPECT_EQ(pmu.stats().overflows, 5u);
}

TEST_F(NetburstOverflow, ForceOvfWithoutPmiOnlySetsOvf) {
  Program(kIqCounter0, kCruEscr0, kInstrUser, MakeCccr(kSelCru01, kForceOvf), 0);
  EXPECT_EQ(Rd(kCccr(kIqCounter0)) & kOvf, 0u);
  Run(Plain());
  EXPECT_NE(Rd(kCccr(kIqCounter0)) & kOvf, 0u);
  EXPECT_EQ(sink.pmis, 0);
}

TEST_F(NetburstOverflow, TwoCountersOverflowingTogetherRaiseTwoPmis) {
  Program(kIqCounter0, kCruEscr0, kInstrUser, MakeCccr(kSelCru01, kOvfPmiT0), kCounterMask);
  Program(kIqCounter2, kCruEscr1, kInstrUser, MakeCccr(kSelCru01, kOvfPmiT0), kCounterMask);
  Run(Plain(), 2);
  EXPECT_EQ(sink.pmis, 2);
}

TEST_F(NetburstOverflow, SoftwareCanSetOvfAndCounterWritesNeverInterrupt) {
  Wr(kCccr(kIqCounter0), MakeCccr(kSelCru01, kOvfPmiT0) | kOvf);
  EXPECT_NE(Rd(kCccr(kIqCounter0)) & kOvf, 0u);
  Wr(kCounter(kIqCounter0), kCounterMask);
  EXPECT_EQ(sink.pmis, 0);
}

class Netburst32BitCounters : public NetburstTest {
 protected:
  Netburst32BitCounters() : NetburstTest(MakeConfig()) {}
  static Config MakeConfig() {
    Config c;
    c.counter_bits = 32;
    return c;
  }
};

TEST_F(Netburst32BitCounters, NarrowerCountersWrapAtTheirWidth) {
  Program(kIqCounter0, kCruEscr0, kInstrUser, MakeCccr(kSelCru01), 0xFFFFFFFFFFull);
  EXPECT_EQ(Count(kIqCounter0), 0xFFFFFFFFu);
  Run(Plain());
  EXPECT_EQ(Count(kIqCounter0), 0u);
  EXPECT_NE(Rd(kCccr(kIqCounter0)) & kOvf, 0u);
}

TEST(NetburstConfig, InvalidConfigurationsAreRejected) {
  Config c;
  EXPECT_TRUE(validate(c).ok());
  c.counters = 0;
  EXPECT_FALSE(validate(c).ok());
  c = Config{};
  c.counter_bits = 48;
  EXPECT_FALSE(validate(c).ok());
  c = Config{};
  c.threads_per_core = 2;
  EXPECT_FALSE(validate(c).ok());
  RecordingInterruptSink sink;
  EXPECT_THROW(NetburstPmu(c, sink), std::invalid_argument);
}

// quiet_retirements (netburst_pmu.h): no overflow before the last instruction of a run that long,
// and for instr_retired exactly the one that wraps the counter.
TEST_F(NetburstOverflow, QuietRetirementsEndExactlyAtTheOverflow) {
  EXPECT_EQ(pmu.quiet_retirements(), UINT64_MAX) << "nothing counts";
  Program(kIqCounter0, kCruEscr0, kInstrUser, MakeCccr(kSelCru01), kCounterMask - 9);
  EXPECT_EQ(pmu.quiet_retirements(), 10u);
  Run(Plain(), 9);
  EXPECT_EQ(Rd(kCccr(kIqCounter0)) & kOvf, 0u);
  Run(Plain());
  EXPECT_NE(Rd(kCccr(kIqCounter0)) & kOvf, 0u) << "the tenth wraps";
}

TEST_F(NetburstOverflow, QuietRetirementsAreOneWhereThePmiWaitsForTheNextEvent) {
  Program(kIqCounter0, kCruEscr0, kInstrUser, MakeCccr(kSelCru01, kOvfPmiT0), kCounterMask);
  Run(Plain());
  ASSERT_EQ(sink.pmis, 0) << "SDM timing: the PMI comes with the next event count";
  EXPECT_EQ(pmu.quiet_retirements(), 1u);
}

TEST_F(NetburstOverflow, QuietRetirementsOfBranchAndCycleEvents) {
  Program(kIqCounter0, kCruEscr2, MakeEscr(kBranchRetired, 0xF, false, true), MakeCccr(kSelCru23),
          kCounterMask);
  EXPECT_EQ(pmu.quiet_retirements(), 1u) << "every instruction of a run may be a branch";
  Program(kIqCounter0, kCruEscr2, MakeEscr(kBranchRetired, 0xF, false, true),
          MakeCccr(kSelCru23, kCompare | kComplement), 0);
  EXPECT_EQ(pmu.quiet_retirements(), 1u) << "Complement counts every instruction's cycles";
  Program(kIqCounter0, kCruEscr0, kInstrUser, MakeCccr(kSelCru01, kForceOvf), 0);
  EXPECT_EQ(pmu.quiet_retirements(), 1u) << "FORCE_OVF overflows at every increment";
}

}  // namespace
}  // namespace pmu::netburst::testing
