// The PMU's state for snapshots and migration (ArchPmuState): what load_state refuses, that a
// loaded state counts on exactly as the saved one would, and processor reset.
#include "tests/arch_perfmon/arch_pmu_fixture.h"

namespace pmu::arch_perfmon::testing {
namespace {

using State = ArchPmuTest;

TEST_F(State, LoadedStateCountsOnAsTheSavedOne) {
  ok(IA32_PERFEVTSEL0, INST_RETIRED | USR | EN | INT | cmask(1) | EDGE);
  ok(IA32_PERFEVTSEL0 + 1, CORE_CYCLES | USR | EN);
  ok(IA32_PMC0, static_cast<uint32_t>(-3));
  pmu().set_debugctl(1ull << 12);
  retire(insn(3, 2));
  const ArchPmuState saved = pmu().state();
  pmu::testing::RecordingInterruptSink other_sink;
  ArchPmu other(Config{}, other_sink);
  ASSERT_TRUE(other.load_state(saved).ok());
  EXPECT_EQ(other.state(), saved);
  for (int n = 0; n < 3; ++n) {
    retire(insn(3, 2));
    other.retire(insn(3, 2));
  }
  EXPECT_EQ(other.state(), pmu().state());
  EXPECT_EQ(other_sink.pmis, sink_.pmis);
}

TEST_F(State, RefusesWhatThisPmuCannotHold) {
  make(Config{.version = 3, .counters = 4, .counter_bits = 40, .fixed_counters = 2});
  const ArchPmuState good = pmu().state();
  auto refused = [&](void (*edit)(ArchPmuState&), const char* why) {
    ArchPmuState s = good;
    edit(s);
    const pmu::Status st = pmu().load_state(s);
    EXPECT_FALSE(st.ok()) << why;
    EXPECT_EQ(pmu().state(), good) << why << ": nothing changed";
  };
  refused([](ArchPmuState& s) { s.pmc[4] = 1; }, "a counter it lacks");
  refused([](ArchPmuState& s) { s.evtsel[5] = 0xC0; }, "a select it lacks");
  refused([](ArchPmuState& s) { s.pmc[0] = 1ull << 40; }, "wider than 40 bits");
  refused([](ArchPmuState& s) { s.evtsel[0] = 1ull << 32; }, "reserved select bit");
  refused([](ArchPmuState& s) { s.fixed[2] = 1; }, "a fixed counter it lacks");
  refused([](ArchPmuState& s) { s.fixed_ctrl = 1ull << 8; }, "a fixed field it lacks");
  refused([](ArchPmuState& s) { s.global_ctrl = 1ull << 4; }, "a global enable it lacks");
  refused([](ArchPmuState& s) { s.global_status = 1ull << 59; }, "CTR_Frz before version 4");
  refused([](ArchPmuState& s) { s.debugctl = 1; }, "a DEBUGCTL bit it does not keep");
  refused([](ArchPmuState& s) { s.edge_previous = 1u << 4; }, "edge state of a counter it lacks");
  EXPECT_EQ(pmu().load_state(good).reason(), "");
}

TEST_F(State, ResetClearsAllButTheStatistics) {
  ok(IA32_PERFEVTSEL0, INST_RETIRED | USR | EN);
  ok(IA32_FIXED_CTR_CTRL, 0x222);
  ok(IA32_PERF_GLOBAL_CTRL, 0x7000000FFull);
  retire(insn(), 4);
  pmu().reset();
  EXPECT_EQ(rd(IA32_PMC0), 0u);
  EXPECT_EQ(rd(IA32_PERFEVTSEL0), 0u);
  EXPECT_EQ(rd(IA32_FIXED_CTR_CTRL), 0u);
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_CTRL), 0xFFu);
  EXPECT_EQ(pmu().stats().instructions, 4u);
}

}  // namespace
}  // namespace pmu::arch_perfmon::testing
