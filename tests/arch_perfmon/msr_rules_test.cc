// Every MSR of the architectural PMU (SDM vol. 3B ch. 20, vol. 4): which exist for a
// configuration, which bits are reserved (#GP, nothing changed), what reads back, and what a
// write does to the others.
#include "tests/arch_perfmon/arch_pmu_fixture.h"

namespace pmu::arch_perfmon::testing {
namespace {

TEST(ArchPmuConfig, Validate) {
  EXPECT_TRUE(validate(Config{}).ok());
  EXPECT_FALSE(validate(Config{.version = 1}).ok());
  EXPECT_FALSE(validate(Config{.version = 5}).ok());
  EXPECT_FALSE(validate(Config{.counters = 0}).ok());
  EXPECT_FALSE(validate(Config{.counters = 9}).ok());
  EXPECT_FALSE(validate(Config{.counter_bits = 31}).ok());
  EXPECT_FALSE(validate(Config{.counter_bits = 49}).ok());
  EXPECT_FALSE(validate(Config{.fixed_counters = 4}).ok());
  EXPECT_EQ(validate(Config{.counters = 9}).reason(),
            "architectural PMU: 9 general-purpose counters (1..8 supported)");
}

using MsrRules = ArchPmuTest;

TEST_F(MsrRules, TheBlockItOwns) {
  for (uint32_t msr : {0xC1u, 0xC8u, 0x186u, 0x18Du, 0x309u, 0x30Bu, 0x345u, 0x38Du, 0x38Eu, 0x38Fu,
                       0x390u, 0x391u, 0x392u, 0x4C1u, 0x4C8u})
    EXPECT_TRUE(ArchPmu::owns_msr(msr)) << std::hex << msr;
  for (uint32_t msr : {0xC0u, 0xC9u, 0x185u, 0x18Eu, 0x308u, 0x30Cu, 0x38Cu, 0x393u, 0x4C0u, 0x4C9u,
                       0x1D9u, 0x300u})
    EXPECT_FALSE(ArchPmu::owns_msr(msr)) << std::hex << msr;
  uint64_t v = 0;
  EXPECT_EQ(pmu().rdmsr(0x1D9, v), MsrResult::kNotArchPerfmonMsr);
  EXPECT_EQ(pmu().wrmsr(0x300, 0), MsrResult::kNotArchPerfmonMsr);
}

TEST_F(MsrRules, CountersBeyondTheConfigurationDoNotExist) {
  make(Config{.version = 3, .counters = 4, .fixed_counters = 2, .full_width_writes = false});
  uint64_t v = 0;
  for (uint32_t msr : {IA32_PMC0 + 4, IA32_PERFEVTSEL0 + 4, IA32_FIXED_CTR0 + 2, IA32_A_PMC0,
                       IA32_PERF_GLOBAL_STATUS_SET, IA32_PERF_GLOBAL_INUSE}) {
    EXPECT_EQ(pmu().rdmsr(msr, v), MsrResult::kGeneralProtection) << std::hex << msr;
    gp(msr, 0);
  }
  ok(IA32_PMC0 + 3, 7);
  EXPECT_EQ(rd(IA32_PMC0 + 3), 7u);
}

TEST_F(MsrRules, LegacyCounterWritesAreSignExtendedFromBit31) {
  ok(IA32_PMC0, 0xFFFFFFF0);  // -16 as a 32-bit write
  EXPECT_EQ(rd(IA32_PMC0), kMask48 - 15);
  ok(IA32_PMC0 + 1, 0x1234500000005ull);  // bits 63:32 of the value are not written
  EXPECT_EQ(rd(IA32_PMC0 + 1), 5u);
  ok(IA32_PMC0 + 2, 0x7FFFFFFF);
  EXPECT_EQ(rd(IA32_PMC0 + 2), 0x7FFFFFFFu);
  EXPECT_EQ(rd(IA32_A_PMC0), kMask48 - 15);  // one counter, two addresses
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_STATUS), 0u) << "a write never sets an overflow bit";
}

TEST_F(MsrRules, FullWidthWritesTakeTheWholeCounter) {
  ok(IA32_A_PMC0, kMask48 - 999);
  EXPECT_EQ(rd(IA32_PMC0), kMask48 - 999);
  gp(IA32_A_PMC0, 1ull << 48);
  EXPECT_EQ(rd(IA32_PMC0), kMask48 - 999) << "a refused write changes nothing";
  EXPECT_EQ(rd(IA32_PERF_CAPABILITIES), 1ull << 13);
  gp(IA32_PERF_CAPABILITIES, 1ull << 13);
  make(Config{.counter_bits = 40});
  ok(IA32_PMC0, 0xFFFFFFFF);
  EXPECT_EQ(rd(IA32_PMC0), (1ull << 40) - 1);
  gp(IA32_A_PMC0, 1ull << 40);
}

TEST_F(MsrRules, EventSelectReservedBits) {
  const uint64_t all = 0xFFFFFFFFull;  // every defined bit, AnyThread included (version 4)
  ok(IA32_PERFEVTSEL0, all);
  EXPECT_EQ(rd(IA32_PERFEVTSEL0), all);
  for (int bit = 32; bit < 64; ++bit) gp(IA32_PERFEVTSEL0, 1ull << bit);
  EXPECT_EQ(rd(IA32_PERFEVTSEL0), all);
  make(Config{.version = 2});
  gp(IA32_PERFEVTSEL0, ANY);
  ok(IA32_PERFEVTSEL0, all & ~ANY);
}

TEST_F(MsrRules, FixedCounterControl) {
  ok(IA32_FIXED_CTR_CTRL, 0xFFF);  // three fields of OS, USR, AnyThread, PMI
  EXPECT_EQ(rd(IA32_FIXED_CTR_CTRL), 0xFFFu);
  for (int bit = 12; bit < 64; ++bit) gp(IA32_FIXED_CTR_CTRL, 1ull << bit);
  make(Config{.version = 2, .fixed_counters = 2});
  gp(IA32_FIXED_CTR_CTRL, fixed_field(0, 4));  // AnyThread is version 3's
  gp(IA32_FIXED_CTR_CTRL, fixed_field(2, 1));  // a third fixed counter
  ok(IA32_FIXED_CTR_CTRL, fixed_field(0, 0xB) | fixed_field(1, 0xB));
  // Fixed counters keep their low fixed_counter_bits.
  ok(IA32_FIXED_CTR0, ~0ull);
  EXPECT_EQ(rd(IA32_FIXED_CTR0), kMask48);
}

TEST_F(MsrRules, GlobalControl) {
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_CTRL), 0xFFu) << "reset: general-purpose counters enabled";
  ok(IA32_PERF_GLOBAL_CTRL, 0x7000000FFull);
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_CTRL), 0x7000000FFull);
  gp(IA32_PERF_GLOBAL_CTRL, 1ull << 8);
  gp(IA32_PERF_GLOBAL_CTRL, 1ull << 35);
  gp(IA32_PERF_GLOBAL_CTRL, 1ull << 63);
  make(Config{.counters = 2, .fixed_counters = 1});
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_CTRL), 0x3u);
  gp(IA32_PERF_GLOBAL_CTRL, 1ull << 2);
  gp(IA32_PERF_GLOBAL_CTRL, 1ull << 33);
}

TEST_F(MsrRules, StatusIsReadOnlyAndResetClearsIt) {
  gp(IA32_PERF_GLOBAL_STATUS, 0);
  ok(IA32_PERF_GLOBAL_STATUS_SET,
     0x5ull | (1ull << 33) | (1ull << 58) | (1ull << 59) | (1ull << 62));
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_STATUS),
            0x5ull | (1ull << 33) | (1ull << 58) | (1ull << 59) | (1ull << 62));
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_STATUS_SET), 0u);
  gp(IA32_PERF_GLOBAL_STATUS_SET, 1ull << 63);  // CondChgd is the processor's to set
  gp(IA32_PERF_GLOBAL_STATUS_SET, 1ull << 40);
  ok(IA32_PERF_GLOBAL_STATUS_RESET, 0x1ull | (1ull << 59) | (1ull << 63));
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_STATUS), 0x4ull | (1ull << 33) | (1ull << 58) | (1ull << 62));
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_STATUS_RESET), 0u);
  gp(IA32_PERF_GLOBAL_STATUS_RESET, 1ull << 8);   // no counter 8
  gp(IA32_PERF_GLOBAL_STATUS_RESET, 1ull << 55);  // ToPA: not this PMU's
  EXPECT_EQ(sink_.pmis, 0) << "setting an overflow bit raises no PMI";
  make(Config{.version = 3});
  gp(IA32_PERF_GLOBAL_STATUS_RESET, 1ull << 59);  // CTR_Frz is version 4's
  ok(IA32_PERF_GLOBAL_STATUS_RESET, (1ull << 62) | (1ull << 63));
}

TEST_F(MsrRules, InUse) {
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_INUSE), 0u);
  ok(IA32_PERFEVTSEL0 + 1, INST_RETIRED);  // an event select, not enabled: in use
  ok(IA32_PERFEVTSEL0 + 2, USR | EN);      // enabled, but event select 0: not in use
  ok(IA32_FIXED_CTR_CTRL, fixed_field(2, 2));
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_INUSE), 0x2ull | (1ull << 34));
  ok(IA32_PERFEVTSEL0 + 2, INT);
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_INUSE), 0x2ull | (1ull << 34) | (1ull << 63));
  ok(IA32_PERFEVTSEL0 + 2, 0);
  ok(IA32_FIXED_CTR_CTRL, fixed_field(0, 8));
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_INUSE), 0x2ull | (1ull << 63));
  gp(IA32_PERF_GLOBAL_INUSE, 0);
}

}  // namespace
}  // namespace pmu::arch_perfmon::testing
