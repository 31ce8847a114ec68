// The architectural PMU against the NetBurst model on one random instruction stream: retired
// instructions, retired branches and mispredicted branches at CPL 3 agree exactly, whatever the
// mix of kernel and user instructions, branch kinds and predictor verdicts (each model counts
// from the same RetiredInstruction facts, through its own event encoding).
#include <random>

#include "pmu/netburst/netburst_pmu.h"
#include "tests/arch_perfmon/arch_pmu_fixture.h"
#include "tests/netburst/netburst_fixture.h"

namespace pmu::arch_perfmon::testing {
namespace {

namespace nb = pmu::netburst::testing;

RetiredInstruction Random(std::mt19937_64& rng) {
  RetiredInstruction i;
  i.rip = rng();
  i.cpl = rng() % 4 == 0 ? 0 : 3;
  i.cycles = 1 + rng() % 4;
  static constexpr BranchKind kKinds[] = {BranchKind::kNone,         BranchKind::kNone,
                                          BranchKind::kConditional,  BranchKind::kDirectJump,
                                          BranchKind::kIndirectJump, BranchKind::kCall,
                                          BranchKind::kReturn};
  i.branch.kind = kKinds[rng() % std::size(kKinds)];
  if (i.is_branch()) {
    i.branch.taken = i.branch.kind != BranchKind::kConditional || rng() % 2;
    i.branch.prediction_valid = true;
    i.branch.predicted_correctly = rng() % 3 != 0;
  }
  return i;
}

TEST(ArchPmuDifferential, InstructionsAndBranchesAgreeWithNetBurst) {
  pmu::testing::RecordingInterruptSink arch_sink, netburst_sink;
  ArchPmu arch(Config{}, arch_sink);
  ASSERT_EQ(arch.wrmsr(IA32_PERFEVTSEL0, INST_RETIRED | USR | EN), MsrResult::kOk);
  ASSERT_EQ(arch.wrmsr(IA32_PERFEVTSEL0 + 1, BR_ALL | USR | EN), MsrResult::kOk);
  ASSERT_EQ(arch.wrmsr(IA32_PERFEVTSEL0 + 2, BR_MISP | USR | EN), MsrResult::kOk);

  pmu::netburst::NetburstPmu netburst(pmu::netburst::Config{}, netburst_sink);
  auto program = [&](int counter, uint32_t escr_msr, uint64_t escr, unsigned select) {
    using pmu::netburst::MsrResult;
    ASSERT_EQ(netburst.wrmsr(escr_msr, escr), MsrResult::kOk);
    ASSERT_EQ(netburst.wrmsr(nb::kCccr(counter), nb::MakeCccr(select)), MsrResult::kOk);
  };
  // instr_retired (non-bogus, untagged), branch_retired (all four MMxx masks),
  // mispred_branch_retired, each at T0_USR only.
  program(nb::kIqCounter0, nb::kCruEscr0, nb::MakeEscr(nb::kInstrRetired, 0x1, false, true),
          nb::kSelCru01);
  program(nb::kIqCounter1, nb::kCruEscr2, nb::MakeEscr(nb::kBranchRetired, 0xF, false, true),
          nb::kSelCru23);
  program(nb::kIqCounter2, nb::kCruEscr1, nb::MakeEscr(nb::kMispredBranchRetired, 0x1, false, true),
          nb::kSelCru01);

  std::mt19937_64 rng(20261128);
  for (int n = 0; n < 20000; ++n) {
    const RetiredInstruction i = Random(rng);
    arch.retire(i);
    netburst.retire(i);
  }
  auto nb_count = [&](int counter) {
    uint64_t v = 0;
    EXPECT_EQ(netburst.rdmsr(nb::kCounter(counter), v), pmu::netburst::MsrResult::kOk);
    return v;
  };
  auto arch_count = [&](uint32_t x) {
    uint64_t v = 0;
    EXPECT_EQ(arch.rdmsr(IA32_PMC0 + x, v), MsrResult::kOk);
    return v;
  };
  EXPECT_GT(arch_count(0), 10000u);
  EXPECT_GT(arch_count(2), 1000u);
  EXPECT_EQ(arch_count(0), nb_count(nb::kIqCounter0));
  EXPECT_EQ(arch_count(1), nb_count(nb::kIqCounter1));
  EXPECT_EQ(arch_count(2), nb_count(nb::kIqCounter2));
}

}  // namespace
}  // namespace pmu::arch_perfmon::testing
