// Snapshot/restore: the versioned byte form round-trips, a restored PMU continues exactly like
// the original (in-flight PMI and edge state included), and unfit states are refused.
#include "pmu/netburst/save_state.h"

#include <cstring>

#include "tests/netburst/netburst_fixture.h"

namespace pmu::netburst::testing {
namespace {

// The SDM timing, so that a PMI can be armed (pending) at the moment of the snapshot.
class NetburstSaveState : public NetburstTest {
 protected:
  NetburstSaveState() : NetburstTest(SdmPmiTimingConfig()) {}
};

void ProgramBusyPmu(NetburstPmu& pmu) {
  auto w = [&](uint32_t msr, uint64_t v) { ASSERT_EQ(pmu.wrmsr(msr, v), MsrResult::kOk); };
  w(kCruEscr0, MakeEscr(kInstrRetired, 1, false, true));
  w(kCounter(kIqCounter0), kCounterMask);  // overflows on the next instruction: PMI armed
  w(kCccr(kIqCounter0), MakeCccr(kSelCru01, kOvfPmiT0));
  w(kCruEscr2, MakeEscr(kBranchRetired, 0xF, true, true));
  w(kCccr(kIqCounter1), MakeCccr(kSelCru23, kCompare | kEdge));
  w(kFsbEscr1, MakeEscr(kGlobalPower, 1, true, true));
  w(kCounter(kBpuCounter2), 123456789);
  w(kCccr(kBpuCounter2), MakeCccr(kSelFsb));
  w(kIqEscr1, 0x1234);
  w(kCccr(kIqCounter2), (MakeCccr(kSelCru01) & ~kEnable) | kCascade);
  w(kCruEscr1, MakeEscr(kInstrRetired, 1, true, true));
}

std::vector<RetiredInstruction> Tail() {
  std::vector<RetiredInstruction> s;
  for (int i = 0; i < 20; ++i) {
    s.push_back(i % 3 ? Plain(3, 1 + i % 4) : Branch(i % 2, i % 5 == 0));
  }
  return s;
}

TEST_F(NetburstSaveState, SerializeDeserializeRoundTrip) {
  ProgramBusyPmu(pmu);
  Run(Branch(true, false));  // wraps IQ_COUNTER0 (PMI armed), edge detector of IQ_COUNTER1 true
  const PmuState s = pmu.state();
  EXPECT_NE(s.pending_pmi, 0u);
  EXPECT_NE(s.edge_previous, 0u);
  const std::vector<std::byte> bytes = serialize(s);
  auto back = deserialize(bytes);
  ASSERT_TRUE(back.ok()) << back.reason();
  EXPECT_EQ(back.value(), s);
  EXPECT_EQ(bytes.size(), 4u + 2 + 1 + 1 + 4 + 4 + 4 + 18 * 12 + 1 + 45 * 4);
  EXPECT_EQ(std::memcmp(bytes.data(), "NBPS", 4), 0);
}

TEST_F(NetburstSaveState, RestoredPmuContinuesIdentically) {
  ProgramBusyPmu(pmu);
  Run(Branch(true, false));
  auto restored_state = deserialize(serialize(pmu.state()));
  ASSERT_TRUE(restored_state.ok());
  RecordingInterruptSink sink2;
  NetburstPmu copy(SdmPmiTimingConfig(), sink2);
  ASSERT_TRUE(copy.load_state(restored_state.value()).ok());
  const int pmis_before = sink.pmis;
  for (const auto& i : Tail()) {
    pmu.retire(i);
    copy.retire(i);
  }
  EXPECT_EQ(copy.state(), pmu.state());
  EXPECT_EQ(sink2.pmis, sink.pmis - pmis_before);
  EXPECT_EQ(sink2.pmis, 1) << "the armed PMI travelled with the state";
  for (uint32_t msr = 0x300; msr <= 0x3FF; ++msr) {
    uint64_t a = 0, b = 0;
    EXPECT_EQ(pmu.rdmsr(msr, a), copy.rdmsr(msr, b));
    EXPECT_EQ(a, b) << std::hex << msr;
  }
}

TEST(NetburstSaveStateFormat, CorruptOrForeignBytesAreRefused) {
  RecordingInterruptSink sink;
  NetburstPmu pmu(Config{}, sink);
  std::vector<std::byte> good = serialize(pmu.state());
  auto expect_error = [](std::vector<std::byte> b, const char* what) {
    auto r = deserialize(b);
    EXPECT_FALSE(r.ok()) << what;
  };
  std::vector<std::byte> b = good;
  b[0] = std::byte{'X'};
  expect_error(b, "bad magic");
  b = good;
  b[4] = std::byte{2};
  expect_error(b, "future version");
  b = good;
  b.pop_back();
  expect_error(b, "truncated");
  b = good;
  b.push_back(std::byte{0});
  expect_error(b, "trailing bytes");
  b = good;
  b[6] = std::byte{19};
  expect_error(b, "19 counters");
  b = good;
  b[7] = std::byte{48};
  expect_error(b, "48-bit counters");
  b = good;
  b[20 + 8 + 3] = std::byte{0x80};  // counter 0's CCCR byte 3: OVF is fine...
  EXPECT_TRUE(deserialize(b).ok());
  b[20 + 8 + 3] = std::byte{0x10};  // ... bit 28 is reserved
  expect_error(b, "reserved CCCR bit");
  b = good;
  b[b.size() - 1] = std::byte{0x80};  // CRU_ESCR5 bit 31
  expect_error(b, "reserved ESCR bit");
  b = good;
  b[20 + 5] = std::byte{0x01};  // counter 0 bit 40
  expect_error(b, "counter wider than 40 bits");
  expect_error({}, "empty");
}

TEST(NetburstSaveStateFit, StateMustFitTheDestinationPmu) {
  RecordingInterruptSink sink;
  NetburstPmu full(Config{}, sink);
  ASSERT_EQ(full.wrmsr(0x3BA, 5), MsrResult::kOk);  // IQ_ESCR0
  ASSERT_EQ(full.wrmsr(kCccr(17), MakeCccr(4)), MsrResult::kOk);

  Config no_iq;
  no_iq.iq_escrs = false;
  NetburstPmu later_model(no_iq, sink);
  EXPECT_FALSE(later_model.load_state(full.state()).ok()) << "IQ_ESCR0 in use";

  Config twelve;
  twelve.counters = 12;
  NetburstPmu small(twelve, sink);
  PmuState s = full.state();
  s.escrs[static_cast<int>(Escr::kIq0)] = 0;
  EXPECT_FALSE(small.load_state(s).ok()) << "counter 17 in use";
  s.cccrs[17] = 0;
  EXPECT_TRUE(small.load_state(s).ok()) << "idle extra counters are fine";

  Config narrow;
  narrow.counter_bits = 32;
  NetburstPmu n32(narrow, sink);
  s = full.state();
  s.counters[3] = uint64_t{1} << 35;
  EXPECT_FALSE(n32.load_state(s).ok()) << "counter does not fit 32 bits";

  // A refused state changes nothing.
  ASSERT_EQ(n32.wrmsr(kCounter(3), 77), MsrResult::kOk);
  uint64_t v = 0;
  ASSERT_EQ(n32.rdmsr(kCounter(3), v), MsrResult::kOk);
  EXPECT_EQ(v, 77u);
}

TEST_F(NetburstSaveState, ResetZeroesEverythingButStats) {
  ProgramBusyPmu(pmu);
  Run(Plain(), 3);
  const Stats before = pmu.stats();
  pmu.reset();
  EXPECT_EQ(pmu.state(), PmuState{});
  EXPECT_FALSE(pmu.wants_events());
  EXPECT_EQ(pmu.stats(), before);
}

}  // namespace
}  // namespace pmu::netburst::testing
