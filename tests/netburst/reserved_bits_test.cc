// Reserved bits, register by register: what #GPs, what is stored, what is ignored.
#include "tests/netburst/netburst_fixture.h"

namespace pmu::netburst::testing {
namespace {

using NetburstReservedBits = NetburstTest;

TEST_F(NetburstReservedBits, EscrBits31To63FaultAndChangeNothing) {
  Wr(kCruEscr0, 0x0400020C);
  for (int bit = 31; bit < 64; ++bit) {
    EXPECT_EQ(pmu.wrmsr(kCruEscr0, 0x0400020Cull | (1ull << bit)), MsrResult::kGeneralProtection)
        << "bit " << bit;
    EXPECT_EQ(Rd(kCruEscr0), 0x0400020Cu) << "bit " << bit;
  }
}

TEST_F(NetburstReservedBits, EscrBits0To30AreStoredAndReadBack) {
  for (int bit = 0; bit < 31; ++bit) {
    Wr(kBsuEscr1, 1ull << bit);
    EXPECT_EQ(Rd(kBsuEscr1), 1ull << bit) << "bit " << bit;
  }
  Wr(kFsbEscr0, 0x7FFFFFFF);
  EXPECT_EQ(Rd(kFsbEscr0), 0x7FFFFFFFu);
}

TEST_F(NetburstReservedBits, CccrReservedBitsFault) {
  // Reserved: 11:0 (bit 11 = extended cascading on some models: not modelled), 29:28, 63:32.
  Wr(kCccr(kIqCounter0), MakeCccr(kSelCru01));
  for (int bit = 0; bit < 64; ++bit) {
    const bool reserved = bit <= 11 || bit == 28 || bit == 29 || bit >= 32;
    if (!reserved) continue;
    for (int counter : {0, 4, 8, 12, 16, 17}) {
      EXPECT_EQ(pmu.wrmsr(kCccr(counter), MakeCccr(kSelCru01) | (1ull << bit)),
                MsrResult::kGeneralProtection)
          << "CCCR " << counter << " bit " << bit;
    }
  }
  EXPECT_EQ(Rd(kCccr(kIqCounter0)), MakeCccr(kSelCru01));
}

TEST_F(NetburstReservedBits, CccrDefinedBitsAreStoredAndReadBack) {
  for (int bit : {12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 30, 31}) {
    Wr(kCccr(3), 1ull << bit);
    EXPECT_EQ(Rd(kCccr(3)), 1ull << bit) << "bit " << bit;
  }
  Wr(kCccr(3), 0xCFFFF000);
  EXPECT_EQ(Rd(kCccr(3)), 0xCFFFF000u);
}

TEST_F(NetburstReservedBits, CounterWriteKeepsLow40BitsAndIgnoresTheRest) {
  Wr(kCounter(5), 0xFFFFFF1234567890ull);
  EXPECT_EQ(Count(5), 0x1234567890ull);
  Wr(kCounter(5), 0xABCD000000000001ull);
  EXPECT_EQ(Count(5), 1u);
}

TEST_F(NetburstReservedBits, NegativePresetSignExtendedOr40BitGivesTheSameCounter) {
  Wr(kCounter(kIqCounter0), static_cast<uint64_t>(int64_t{-1000}));
  const uint64_t sign_extended = Count(kIqCounter0);
  Wr(kCounter(kIqCounter0), (uint64_t{1} << 40) - 1000);
  EXPECT_EQ(Count(kIqCounter0), sign_extended);
  EXPECT_EQ(sign_extended, 0xFFFFFFFC18ull);
}

TEST_F(NetburstReservedBits, FaultingWritesLeaveCountingUntouched) {
  Program(kIqCounter0, kCruEscr0, MakeEscr(kInstrRetired, 1, false, true), MakeCccr(kSelCru01));
  EXPECT_EQ(pmu.wrmsr(kCccr(kIqCounter0), 1), MsrResult::kGeneralProtection);
  EXPECT_EQ(pmu.wrmsr(kCruEscr0, 1ull << 40), MsrResult::kGeneralProtection);
  Run(Plain(), 7);
  EXPECT_EQ(Count(kIqCounter0), 7u);
}

}  // namespace
}  // namespace pmu::netburst::testing
