// The counter <-> ESCR binding through the CCCR's ESCR-select field, checked against the SDM's
// table (transcribed here as addresses), and what a counter does with each selection.
#include <array>

#include "pmu/netburst/binding.h"
#include "tests/netburst/netburst_fixture.h"

namespace pmu::netburst::testing {
namespace {

// SDM table "Performance Counter MSRs and Associated CCCR and ESCR MSRs (Pentium 4)": for each
// counter, the ESCR MSR behind ESCR select 0..7 (0 = none).
constexpr std::array<std::array<uint32_t, 8>, 18> kSdm = {{
    {0x3B2, 0x3B4, 0x3AA, 0x3B6, 0x3AC, 0x3C8, 0x3A2, 0x3A0},  // BPU_COUNTER0
    {0x3B2, 0x3B4, 0x3AA, 0x3B6, 0x3AC, 0x3C8, 0x3A2, 0x3A0},  // BPU_COUNTER1
    {0x3B3, 0x3B5, 0x3AB, 0x3B7, 0x3AD, 0x3C9, 0x3A3, 0x3A1},  // BPU_COUNTER2
    {0x3B3, 0x3B5, 0x3AB, 0x3B7, 0x3AD, 0x3C9, 0x3A3, 0x3A1},  // BPU_COUNTER3
    {0x3C0, 0x3C4, 0x3C2, 0, 0, 0, 0, 0},                      // MS_COUNTER0
    {0x3C0, 0x3C4, 0x3C2, 0, 0, 0, 0, 0},                      // MS_COUNTER1
    {0x3C1, 0x3C5, 0x3C3, 0, 0, 0, 0, 0},                      // MS_COUNTER2
    {0x3C1, 0x3C5, 0x3C3, 0, 0, 0, 0, 0},                      // MS_COUNTER3
    {0x3A6, 0x3A4, 0x3AE, 0x3B0, 0, 0x3A8, 0, 0},              // FLAME_COUNTER0
    {0x3A6, 0x3A4, 0x3AE, 0x3B0, 0, 0x3A8, 0, 0},              // FLAME_COUNTER1
    {0x3A7, 0x3A5, 0x3AF, 0x3B1, 0, 0x3A9, 0, 0},              // FLAME_COUNTER2
    {0x3A7, 0x3A5, 0x3AF, 0x3B1, 0, 0x3A9, 0, 0},              // FLAME_COUNTER3
    {0x3BA, 0x3CA, 0x3BC, 0x3BE, 0x3B8, 0x3CC, 0x3E0, 0},      // IQ_COUNTER0
    {0x3BA, 0x3CA, 0x3BC, 0x3BE, 0x3B8, 0x3CC, 0x3E0, 0},      // IQ_COUNTER1
    {0x3BB, 0x3CB, 0x3BD, 0, 0x3B9, 0x3CD, 0x3E1, 0},          // IQ_COUNTER2
    {0x3BB, 0x3CB, 0x3BD, 0, 0x3B9, 0x3CD, 0x3E1, 0},          // IQ_COUNTER3
    {0x3BA, 0x3CA, 0x3BC, 0x3BE, 0x3B8, 0x3CC, 0x3E0, 0},      // IQ_COUNTER4
    {0x3BB, 0x3CB, 0x3BD, 0, 0x3B9, 0x3CD, 0x3E1, 0},          // IQ_COUNTER5
}};

TEST(NetburstBinding, MatrixMatchesTheSdmTable) {
  for (int c = 0; c < 18; ++c) {
    for (unsigned s = 0; s < 8; ++s) {
      SCOPED_TRACE(::testing::Message() << "counter " << c << " select " << s);
      const std::optional<Escr> e = escr_for(c, s);
      if (kSdm[c][s] == 0) {
        EXPECT_EQ(e, std::nullopt);
      } else {
        ASSERT_TRUE(e.has_value());
        EXPECT_EQ(escr_msr(*e), kSdm[c][s]);
        EXPECT_EQ(select_for(c, *e), s);
      }
    }
  }
  EXPECT_EQ(escr_for(18, 0), std::nullopt);
  EXPECT_EQ(escr_for(0, 8), std::nullopt);
}

TEST(NetburstBinding, IqEscrsUnreachableWithoutThem) {
  for (int c : {12, 13, 14, 15, 16, 17}) {
    EXPECT_EQ(escr_for(c, 0, /*iq_escrs=*/false), std::nullopt) << c;
    EXPECT_TRUE(escr_for(c, 0, /*iq_escrs=*/true).has_value()) << c;
  }
}

TEST(NetburstBinding, CascadeAlternatesPairFirstWithFirstAndSecondWithSecond) {
  const std::array<int, 18> kAlt = {2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13, -1, -1};
  for (int c = 0; c < 18; ++c) EXPECT_EQ(cascade_alternate(c), kAlt[c]) << c;
}

using NetburstBindingCounts = NetburstTest;

TEST_F(NetburstBindingCounts, InstrRetiredCountsOnlyOnCountersThatReachItsEscr) {
  // instr_retired in CRU_ESCR0 and CRU_ESCR1; every counter programmed with select 4.
  Wr(kCruEscr0, MakeEscr(kInstrRetired, 1, true, true));
  Wr(kCruEscr1, MakeEscr(kInstrRetired, 1, true, true));
  for (int c = 0; c < 18; ++c) Wr(kCccr(c), MakeCccr(kSelCru01));
  Run(Plain(), 5);
  for (int c = 0; c < 18; ++c) {
    // Counters 0-3 read PMH_ESCRx with select 4 (event 2 there is not modelled); 4-11 have no
    // ESCR under select 4; 12-17 read CRU_ESCR0/1.
    EXPECT_EQ(Count(c), c >= 12 ? 5u : 0u) << "counter " << c;
  }
}

TEST_F(NetburstBindingCounts, UnusableSelectionCountsNothingEvenUnderComplement) {
  // Counter 14 has no ESCR behind select 3 (no SSU_ESCR1); MS counter 4 none behind select 5.
  // Compare+Complement with threshold 15 would count every cycle of a real event.
  Wr(kCccr(kIqCounter2), MakeCccr(3, kCompare | kComplement | Threshold(15)));
  Wr(kCccr(kMsCounter0), MakeCccr(5, kCompare | kComplement | Threshold(15)));
  Wr(kCccr(kIqCounter3), MakeCccr(7));
  EXPECT_TRUE(pmu.wants_events());
  Run(Plain(3, 10), 4);
  EXPECT_EQ(Count(kIqCounter2), 0u);
  EXPECT_EQ(Count(kMsCounter0), 0u);
  EXPECT_EQ(Count(kIqCounter3), 0u);
  EXPECT_FALSE(pmu.counter_view(kIqCounter2).escr.has_value());
  EXPECT_FALSE(pmu.counter_view(kIqCounter2).counts_events);
}

TEST_F(NetburstBindingCounts, SameEventSelectMeansDifferentEventsInDifferentEscrs) {
  // Event select 2 is instr_retired in CRU_ESCR0 but machine_clear in CRU_ESCR2 (unmodelled).
  Program(kIqCounter0, kCruEscr0, MakeEscr(2, 1, true, true), MakeCccr(kSelCru01));
  Program(kIqCounter1, kCruEscr2, MakeEscr(2, 1, true, true), MakeCccr(kSelCru23));
  Run(Plain(), 9);
  EXPECT_EQ(Count(kIqCounter0), 9u);
  EXPECT_EQ(Count(kIqCounter1), 0u);
  ASSERT_NE(pmu.counter_view(kIqCounter1).event, nullptr);
  EXPECT_EQ(pmu.counter_view(kIqCounter1).event->name, "machine_clear");
  EXPECT_FALSE(pmu.counter_view(kIqCounter1).counts_events);
  EXPECT_EQ(pmu.counter_view(kIqCounter0).event->name, "instr_retired");
}

TEST_F(NetburstBindingCounts, TwoCountersCanShareOneEscr) {
  Wr(kCruEscr0, MakeEscr(kInstrRetired, 1, true, true));
  Wr(kCccr(kIqCounter0), MakeCccr(kSelCru01));
  Wr(kCccr(kIqCounter1), MakeCccr(kSelCru01));
  Wr(kCccr(kIqCounter4), MakeCccr(kSelCru01));
  Run(Plain(), 3);
  EXPECT_EQ(Count(kIqCounter0), 3u);
  EXPECT_EQ(Count(kIqCounter1), 3u);
  EXPECT_EQ(Count(kIqCounter4), 3u);
}

}  // namespace
}  // namespace pmu::netburst::testing
