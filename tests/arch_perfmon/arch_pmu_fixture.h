// Shared helpers of the architectural PMU suite: a PMU of a given configuration with a recording
// interrupt sink, the SDM's MSR addresses and bits, and retired instructions to feed it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

#include "pmu/arch_perfmon/arch_pmu.h"
#include "tests/support/recording_interrupt_sink.h"

namespace pmu::arch_perfmon::testing {

// SDM vol. 4, "Architectural MSRs".
inline constexpr uint32_t IA32_PMC0 = 0xC1;
inline constexpr uint32_t IA32_PERFEVTSEL0 = 0x186;
inline constexpr uint32_t IA32_FIXED_CTR0 = 0x309;
inline constexpr uint32_t IA32_PERF_CAPABILITIES = 0x345;
inline constexpr uint32_t IA32_FIXED_CTR_CTRL = 0x38D;
inline constexpr uint32_t IA32_PERF_GLOBAL_STATUS = 0x38E;
inline constexpr uint32_t IA32_PERF_GLOBAL_CTRL = 0x38F;
inline constexpr uint32_t IA32_PERF_GLOBAL_STATUS_RESET = 0x390;
inline constexpr uint32_t IA32_PERF_GLOBAL_STATUS_SET = 0x391;
inline constexpr uint32_t IA32_PERF_GLOBAL_INUSE = 0x392;
inline constexpr uint32_t IA32_A_PMC0 = 0x4C1;

// IA32_PERFEVTSELx (SDM vol. 3B, Figure "Layout of IA32_PERFEVTSELx MSRs").
inline constexpr uint64_t USR = 1ull << 16, OS = 1ull << 17, EDGE = 1ull << 18, INT = 1ull << 20,
                          ANY = 1ull << 21, EN = 1ull << 22, INV = 1ull << 23;
inline constexpr uint64_t cmask(uint8_t c) { return uint64_t{c} << 24; }
// Events by (event select, unit mask).
inline constexpr uint64_t INST_RETIRED = 0x00C0, CORE_CYCLES = 0x003C, REF_CYCLES = 0x013C,
                          BR_ALL = 0x00C4, BR_CONDITIONAL = 0x01C4, BR_NEAR_CALL = 0x02C4,
                          BR_NEAR_RETURN = 0x08C4, BR_NEAR_TAKEN = 0x20C4, BR_MISP = 0x00C5,
                          LLC_REFERENCE = 0x4F2E, LLC_MISS = 0x412E, MEM_INST_ALL_LOADS = 0x81D0,
                          MEM_INST_ALL_STORES = 0x82D0;

// FIXED_CTR_CTRL field of fixed counter i: OS 1, USR 2, AnyThread 4, PMI 8.
inline constexpr uint64_t fixed_field(int i, uint64_t bits) { return bits << (4 * i); }

inline constexpr uint64_t kMask48 = (1ull << 48) - 1;

class ArchPmuTest : public ::testing::Test {
 protected:
  void make(const Config& c = {}) { pmu_ = std::make_unique<ArchPmu>(c, sink_); }
  void SetUp() override { make(); }

  ArchPmu& pmu() { return *pmu_; }
  MsrResult wr(uint32_t msr, uint64_t v) { return pmu_->wrmsr(msr, v); }
  uint64_t rd(uint32_t msr) {
    uint64_t v = 0xDEADBEEF;
    EXPECT_EQ(pmu_->rdmsr(msr, v), MsrResult::kOk) << std::hex << msr;
    return v;
  }
  void ok(uint32_t msr, uint64_t v) { ASSERT_EQ(wr(msr, v), MsrResult::kOk) << std::hex << msr; }
  void gp(uint32_t msr, uint64_t v) {
    EXPECT_EQ(wr(msr, v), MsrResult::kGeneralProtection) << std::hex << msr << " " << v;
  }

  static RetiredInstruction insn(uint8_t cpl = 3, uint32_t cycles = 1) {
    RetiredInstruction i;
    i.rip = 0x401000;
    i.cpl = cpl;
    i.cycles = cycles;
    return i;
  }
  static RetiredInstruction branch(BranchKind kind, bool taken = true) {
    RetiredInstruction i = insn();
    i.branch.kind = kind;
    i.branch.taken = taken;
    return i;
  }
  void retire(const RetiredInstruction& i, int times = 1) {
    for (int n = 0; n < times; ++n) pmu_->retire(i);
  }

  pmu::testing::RecordingInterruptSink sink_;
  std::unique_ptr<ArchPmu> pmu_;
};

}  // namespace pmu::arch_perfmon::testing
