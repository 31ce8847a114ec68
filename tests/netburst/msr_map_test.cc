// The MSR map, address by address: which registers exist in 0x300-0x3FF, which are #GP, and
// what is not the PMU's at all.
#include <set>
#include <string>

#include "pmu/netburst/msr_map.h"
#include "tests/netburst/netburst_fixture.h"

namespace pmu::netburst::testing {
namespace {

// The 45 ESCR addresses of the SDM's ESCR table (family 0xF models 1-2, IQ_ESCR0/1 included).
const std::set<uint32_t>& SdmEscrs() {
  static const std::set<uint32_t> kSet = [] {
    std::set<uint32_t> s;
    for (uint32_t a = 0x3A0; a <= 0x3BE; ++a) s.insert(a);  // BSU_ESCR0 .. SSU_ESCR0
    for (uint32_t a = 0x3C0; a <= 0x3C5; ++a) s.insert(a);  // MS, TBPU, TC
    for (uint32_t a = 0x3C8; a <= 0x3CD; ++a) s.insert(a);  // IX, ALF, CRU_ESCR2/3
    s.insert(0x3E0);                                        // CRU_ESCR4
    s.insert(0x3E1);                                        // CRU_ESCR5
    return s;
  }();
  return kSet;
}

enum class Kind { kCounter, kCccr, kEscr, kNone };

Kind Expected(uint32_t msr, int counters, bool iq) {
  if (msr >= 0x300 && msr < 0x300u + counters) return Kind::kCounter;
  if (msr >= 0x360 && msr < 0x360u + counters) return Kind::kCccr;
  if (SdmEscrs().count(msr) && (iq || (msr != 0x3BA && msr != 0x3BB))) return Kind::kEscr;
  return Kind::kNone;
}

void CheckWholeBlock(const Config& config) {
  RecordingInterruptSink sink;
  NetburstPmu pmu(config, sink);
  int valid = 0;
  for (uint32_t msr = 0x300; msr <= 0x3FF; ++msr) {
    SCOPED_TRACE(::testing::Message() << std::hex << "msr 0x" << msr);
    const Kind k = Expected(msr, static_cast<int>(config.counters), config.iq_escrs);
    uint64_t v = 0x1234;
    if (k == Kind::kNone) {
      EXPECT_EQ(pmu.rdmsr(msr, v), MsrResult::kGeneralProtection);
      EXPECT_EQ(pmu.wrmsr(msr, 0), MsrResult::kGeneralProtection);
      continue;
    }
    ++valid;
    EXPECT_EQ(pmu.rdmsr(msr, v), MsrResult::kOk);
    EXPECT_EQ(v, 0u) << "every register is 0 after reset";
    EXPECT_EQ(pmu.wrmsr(msr, 0), MsrResult::kOk);
  }
  const int escrs = config.iq_escrs ? 45 : 43;
  EXPECT_EQ(valid, 2 * static_cast<int>(config.counters) + escrs);
}

TEST(NetburstMsrMap, EveryAddressOfTheBlockOnModel2) { CheckWholeBlock(Config{}); }

TEST(NetburstMsrMap, IqEscrsAbsentOnLaterModels) {
  Config c;
  c.iq_escrs = false;
  CheckWholeBlock(c);
}

TEST(NetburstMsrMap, FewerCountersMakeTheirCountersAndCccrsGp) {
  Config c;
  c.counters = 12;
  CheckWholeBlock(c);
}

TEST(NetburstMsrMap, AddressesOutsideTheBlockAreNotMine) {
  RecordingInterruptSink sink;
  NetburstPmu pmu(Config{}, sink);
  for (uint32_t msr :
       {0x0u, 0x2FFu, 0x400u, 0x1A0u, 0x186u, 0xC0000105u, 0x4B564D00u, 0x40000040u}) {
    uint64_t v = 0;
    EXPECT_EQ(pmu.rdmsr(msr, v), MsrResult::kNotNetburstMsr) << std::hex << msr;
    EXPECT_EQ(pmu.wrmsr(msr, 0), MsrResult::kNotNetburstMsr) << std::hex << msr;
  }
  EXPECT_TRUE(NetburstPmu::owns_msr(0x300));
  EXPECT_TRUE(NetburstPmu::owns_msr(0x3FF));
  EXPECT_FALSE(NetburstPmu::owns_msr(0x2FF));
}

TEST(NetburstMsrMap, PebsAndHoleAddressesAreGp) {
  RecordingInterruptSink sink;
  NetburstPmu pmu(Config{}, sink);
  // 0x3BF (SSU_ESCR1: not in the SDM), 0x3C6/7, 0x3CE-0x3DF, 0x3F0-0x3F2 (PEBS: unavailable).
  for (uint32_t msr : {0x3BFu, 0x3C6u, 0x3C7u, 0x3CEu, 0x3DFu, 0x3E2u, 0x3F0u, 0x3F1u, 0x3F2u,
                       0x312u, 0x35Fu, 0x372u, 0x39Fu}) {
    uint64_t v = 0;
    EXPECT_EQ(pmu.rdmsr(msr, v), MsrResult::kGeneralProtection) << std::hex << msr;
    EXPECT_EQ(pmu.wrmsr(msr, 0), MsrResult::kGeneralProtection) << std::hex << msr;
  }
}

TEST(NetburstMsrMap, EscrTableNamesAndAddressesMatchTheSdm) {
  // A sample of names against the SDM's addresses, and the table's own consistency.
  EXPECT_EQ(escr_at(0x3A0), Escr::kBsu0);
  EXPECT_EQ(escr_at(0x3A2), Escr::kFsb0);
  EXPECT_EQ(escr_at(0x3B8), Escr::kCru0);
  EXPECT_EQ(escr_at(0x3BA), Escr::kIq0);
  EXPECT_EQ(escr_at(0x3BE), Escr::kSsu0);
  EXPECT_EQ(escr_at(0x3C2), Escr::kTbpu0);
  EXPECT_EQ(escr_at(0x3CC), Escr::kCru2);
  EXPECT_EQ(escr_at(0x3E1), Escr::kCru5);
  EXPECT_EQ(escr_at(0x3BF), std::nullopt);
  std::set<uint32_t> seen;
  std::set<std::string> names;
  for (int i = 0; i < kEscrCount; ++i) {
    const EscrInfo& e = escr_table()[i];
    EXPECT_EQ(static_cast<int>(e.id), i);
    EXPECT_TRUE(SdmEscrs().count(e.msr)) << std::hex << e.msr;
    EXPECT_EQ(escr_at(e.msr), e.id);
    EXPECT_EQ(e.model_specific, e.msr == 0x3BA || e.msr == 0x3BB);
    seen.insert(e.msr);
    names.insert(std::string(e.name));
  }
  EXPECT_EQ(seen.size(), 45u);
  EXPECT_EQ(names.size(), 45u);
  EXPECT_EQ(escr_name(Escr::kCru0), "CRU_ESCR0");
  EXPECT_EQ(counter_name(12), "IQ_COUNTER0");
  EXPECT_EQ(cccr_name(17), "IQ_CCCR5");
  EXPECT_EQ(counter_name(18), "");
}

}  // namespace
}  // namespace pmu::netburst::testing
