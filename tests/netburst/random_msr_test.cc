// Random sequences of MSR writes and reads, interleaved with random instructions, under several
// configurations: nothing crashes, a refused write changes nothing, an accepted write reads back,
// counters never exceed their width, and the state always round-trips.
#include <cstring>
#include <random>

#include "tests/netburst/netburst_fixture.h"

namespace pmu::netburst::testing {
namespace {

uint64_t RandomValue(std::mt19937_64& rng) {
  switch (rng() % 6) {
    case 0: return 0;
    case 1: return rng();                           // anything, reserved bits likely
    case 2: return rng() & 0x7FFFFFFF;              // a plausible ESCR
    case 3: return (rng() & 0xCFFFF000) | 0x30000;  // a plausible CCCR
    case 4: return rng() & ((uint64_t{1} << 40) - 1);
    default: return ~uint64_t{0} - (rng() % 16);  // near-wrap presets
  }
}

uint32_t RandomMsr(std::mt19937_64& rng) {
  switch (rng() % 5) {
    case 0: return 0x300 + rng() % 0x100;          // anywhere in the block
    case 1: return 0x300 + rng() % 18;             // a counter
    case 2: return 0x360 + rng() % 18;             // a CCCR
    case 3: return 0x3A0 + rng() % 0x42;           // the ESCR range, holes included
    default: return static_cast<uint32_t>(rng());  // anywhere at all
  }
}

RetiredInstruction RandomInstruction(std::mt19937_64& rng) {
  RetiredInstruction i;
  i.rip = rng();
  i.cpl = static_cast<uint8_t>(rng() % 4);
  i.cycles = static_cast<uint32_t>(rng() % 4 == 0 ? rng() : rng() % 8);
  i.branch.kind = static_cast<BranchKind>(rng() % 6);
  i.branch.taken = rng() & 1;
  i.branch.prediction_valid = rng() & 1;
  i.branch.predicted_correctly = rng() & 1;
  i.cache_miss_count = static_cast<uint8_t>(rng() % 5 == 0 ? rng() : rng() % 3);
  for (auto& m : i.cache_misses) m.source = static_cast<DataSource>(rng() % 10);
  return i;
}

void Fuzz(const Config& config, uint64_t seed, int steps) {
  std::mt19937_64 rng(seed);
  RecordingInterruptSink sink;
  NetburstPmu pmu(config, sink);
  const uint64_t mask = (uint64_t{1} << config.counter_bits) - 1;
  for (int step = 0; step < steps; ++step) {
    const int what = static_cast<int>(rng() % 10);
    if (what < 5) {
      const uint32_t msr = RandomMsr(rng);
      const uint64_t value = RandomValue(rng);
      const PmuState before = pmu.state();
      const MsrResult r = pmu.wrmsr(msr, value);
      if (r != MsrResult::kOk) {
        ASSERT_EQ(pmu.state(), before) << std::hex << msr << " " << value;
        ASSERT_EQ(r == MsrResult::kNotNetburstMsr, msr < 0x300 || msr > 0x3FF);
      } else {
        uint64_t back = 0;
        ASSERT_EQ(pmu.rdmsr(msr, back), MsrResult::kOk);
        ASSERT_EQ(back, msr < 0x312 ? (value & mask) : value) << std::hex << msr;
      }
    } else if (what < 6) {
      uint64_t v = 0;
      (void)pmu.rdmsr(RandomMsr(rng), v);
    } else {
      pmu.retire(RandomInstruction(rng));
    }
    if (step % 997 == 0) {
      const PmuState s = pmu.state();
      for (uint64_t c : s.counters) ASSERT_LE(c, mask);
      auto back = deserialize(serialize(s));
      ASSERT_TRUE(back.ok());
      ASSERT_EQ(back.value(), s);
    }
  }
  // The PMI count can only grow with overflows.
  EXPECT_LE(pmu.stats().pmis, pmu.stats().overflows + 18);
}

TEST(NetburstRandomMsrs, DefaultProfileNeverCrashesAndKeepsInvariants) {
  for (uint64_t seed = 1; seed <= 4; ++seed) Fuzz(Config{}, seed, 50000);
}

TEST(NetburstRandomMsrs, OtherConfigurationsNeverCrash) {
  Config c;
  c.counters = 7;
  c.counter_bits = 32;
  c.iq_escrs = false;
  c.third_level_cache = true;
  c.pmi_timing = PmiTiming::kAtOverflow;
  for (uint64_t seed = 10; seed <= 12; ++seed) Fuzz(c, seed, 50000);
}

TEST(NetburstRandomMsrs, RandomStatesAreRefusedOrLoadedNeverCrash) {
  std::mt19937_64 rng(99);
  RecordingInterruptSink sink;
  Config c;
  c.counters = 10;
  c.iq_escrs = false;
  NetburstPmu pmu(c, sink);
  for (int i = 0; i < 2000; ++i) {
    std::vector<std::byte> bytes(rng() % 500);
    for (auto& b : bytes) b = static_cast<std::byte>(rng());
    if (bytes.size() >= 4 && (rng() & 1))
      std::memcpy(bytes.data(), "NBPS\x01\x00", 6 < bytes.size() ? 6 : 4);
    auto r = deserialize(bytes);
    if (auto* s = (r.ok() ? &r.value() : nullptr)) (void)pmu.load_state(*s);
    PmuState s;
    s.counter_count = static_cast<uint8_t>(rng() % 20);
    for (auto& v : s.counters) v = rng() & ((uint64_t{1} << 41) - 1);
    for (auto& v : s.cccrs) v = static_cast<uint32_t>(rng() & 0xCFFFF000);
    for (auto& v : s.escrs) v = static_cast<uint32_t>(rng() % 4 ? 0 : rng() & 0x7FFFFFFF);
    s.pending_pmi = static_cast<uint32_t>(rng());
    if (pmu.load_state(s).ok()) {
      for (int k = 0; k < 20; ++k) pmu.retire(RandomInstruction(rng));
    }
  }
}

}  // namespace
}  // namespace pmu::netburst::testing
