// Shared helpers for the NetBurst PMU suite. Addresses and bit values are written out as the
// SDM gives them (literals), not taken from pmu/netburst, so the tests check the model against
// the references rather than against itself.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "pmu/netburst/netburst_pmu.h"
#include "pmu/retired_instruction.h"
#include "tests/support/recording_interrupt_sink.h"

namespace pmu::netburst::testing {

using pmu::testing::RecordingInterruptSink;

// Counters 0x300 + n, CCCRs 0x360 + n.
inline constexpr uint32_t kCounter(int n) { return 0x300u + static_cast<uint32_t>(n); }
inline constexpr uint32_t kCccr(int n) { return 0x360u + static_cast<uint32_t>(n); }

// A few ESCR addresses (SDM table of ESCR MSRs).
inline constexpr uint32_t kBsuEscr0 = 0x3A0, kBsuEscr1 = 0x3A1;
inline constexpr uint32_t kFsbEscr0 = 0x3A2, kFsbEscr1 = 0x3A3;
inline constexpr uint32_t kCruEscr0 = 0x3B8, kCruEscr1 = 0x3B9;
inline constexpr uint32_t kCruEscr2 = 0x3CC, kCruEscr3 = 0x3CD;
inline constexpr uint32_t kIqEscr0 = 0x3BA, kIqEscr1 = 0x3BB;
inline constexpr uint32_t kTbpuEscr0 = 0x3C2;
inline constexpr uint32_t kMsEscr0 = 0x3C0;

// Counter numbers.
inline constexpr int kBpuCounter0 = 0, kBpuCounter1 = 1, kBpuCounter2 = 2, kBpuCounter3 = 3;
inline constexpr int kMsCounter0 = 4;
inline constexpr int kIqCounter0 = 12, kIqCounter1 = 13, kIqCounter2 = 14, kIqCounter3 = 15,
                     kIqCounter4 = 16, kIqCounter5 = 17;

// ESCR fields (SDM figure): event select 30:25, mask 24:9, T0_OS 3, T0_USR 2, T1_OS 1, T1_USR 0.
inline constexpr uint64_t MakeEscr(unsigned event, unsigned mask, bool os, bool usr) {
  return (uint64_t{event} << 25) | (uint64_t{mask} << 9) | (os ? 8u : 0u) | (usr ? 4u : 0u);
}
inline constexpr uint64_t kT1Os = 2, kT1Usr = 1, kTagEnable = 0x10;

// CCCR fields: Enable 12, ESCR select 15:13, active thread 17:16, Compare 18, Complement 19,
// Threshold 23:20, Edge 24, FORCE_OVF 25, OVF_PMI_T0 26, OVF_PMI_T1 27, Cascade 30, OVF 31.
inline constexpr uint64_t kEnable = 1u << 12;
inline constexpr uint64_t kThreadAny = 3u << 16;
inline constexpr uint64_t kCompare = 1u << 18, kComplement = 1u << 19, kEdge = 1u << 24;
inline constexpr uint64_t kForceOvf = 1u << 25, kOvfPmiT0 = 1u << 26, kOvfPmiT1 = 1u << 27;
inline constexpr uint64_t kCascade = 1u << 30, kOvf = 1u << 31;
inline constexpr uint64_t MakeCccr(unsigned select, uint64_t flags = 0) {
  return kEnable | (uint64_t{select} << 13) | kThreadAny | flags;
}
inline constexpr uint64_t Threshold(unsigned t) { return uint64_t{t} << 20; }

// Event selects and CCCR ESCR-select values of the modelled events (SDM appendix A).
inline constexpr unsigned kInstrRetired = 0x02, kMispredBranchRetired = 0x03, kBranchRetired = 0x06,
                          kGlobalPower = 0x13, kBsqCacheRef = 0x0C;
inline constexpr unsigned kSelCru01 = 4, kSelCru23 = 5, kSelFsb = 6, kSelBsu = 7;

inline constexpr uint64_t kCounterMask = (uint64_t{1} << 40) - 1;

// Instruction builders.
inline RetiredInstruction Plain(uint8_t cpl = 3, uint32_t cycles = 1) {
  RetiredInstruction i;
  i.rip = 0x401000;
  i.cpl = cpl;
  i.cycles = cycles;
  return i;
}
inline RetiredInstruction Branch(bool taken, bool mispredicted, uint8_t cpl = 3,
                                 BranchKind kind = BranchKind::kConditional) {
  RetiredInstruction i = Plain(cpl);
  i.branch.kind = kind;
  i.branch.taken = taken;
  i.branch.prediction_valid = true;
  i.branch.predicted_correctly = !mispredicted;
  return i;
}
inline RetiredInstruction Load(std::vector<DataSource> sources, uint8_t cpl = 3,
                               uint32_t cycles = 1) {
  RetiredInstruction i = Plain(cpl, cycles);
  for (DataSource s : sources) {
    i.cache_misses[i.cache_miss_count].source = s;
    i.cache_misses[i.cache_miss_count].data_address = 0x10000 + 64u * i.cache_miss_count;
    ++i.cache_miss_count;
  }
  return i;
}

// The SDM's PMI timing (a profile option; the default follows the seed: PMI at the overflow).
inline Config SdmPmiTimingConfig() {
  Config c;
  c.pmi_timing = PmiTiming::kNextEventCount;
  return c;
}

class NetburstTest : public ::testing::Test {
 protected:
  explicit NetburstTest(Config config = Config{}) : pmu(config, sink) {}

  void Wr(uint32_t msr, uint64_t value) {
    ASSERT_EQ(pmu.wrmsr(msr, value), MsrResult::kOk) << std::hex << "wrmsr " << msr << " " << value;
  }
  uint64_t Rd(uint32_t msr) {
    uint64_t v = 0xDEAD;
    EXPECT_EQ(pmu.rdmsr(msr, v), MsrResult::kOk) << std::hex << "rdmsr " << msr;
    return v;
  }
  // The programming sequence of the SDM / the bundled guest kernel: stop, ESCR, value, CCCR.
  void Program(int counter, uint32_t escr_msr, uint64_t escr, uint64_t cccr, uint64_t start = 0) {
    Wr(kCccr(counter), 0);
    Wr(escr_msr, escr);
    Wr(kCounter(counter), start);
    Wr(kCccr(counter), cccr);
  }
  uint64_t Count(int counter) { return Rd(kCounter(counter)); }
  void Run(const RetiredInstruction& insn, int times = 1) {
    for (int i = 0; i < times; ++i) pmu.retire(insn);
  }

  RecordingInterruptSink sink;
  NetburstPmu pmu;
};

}  // namespace pmu::netburst::testing
