// Last branch records, Skylake's (SDM vol. 3B "Last Branch Recording", LBR format 5; Linux's
// arch/x86/events/intel/lbr.c is the guest that programs them): the MSRs Linux probes and writes
// back, what is recorded and what LBR_SELECT suppresses, call-stack mode, LBR_INFO, DEBUGCTL.LBR
// and the freeze on PMI. Addresses and bits are written from the SDM, not taken from lbr.h.
#include <gtest/gtest.h>

#include "tests/arch_perfmon/arch_pmu_fixture.h"

namespace pmu::arch_perfmon::testing {
namespace {

inline constexpr uint32_t LBR_SELECT = 0x1C8, LBR_TOS = 0x1C9, LBR_FROM0 = 0x680, LBR_TO0 = 0x6C0,
                          LBR_INFO0 = 0xDC0;
inline constexpr uint64_t DEBUGCTL_LBR = 1, FREEZE_LBRS_ON_PMI = 1ull << 11;
// LBR_SELECT: 1 suppresses.
inline constexpr uint64_t CPL_EQ_0 = 1, CPL_NEQ_0 = 2, JCC = 4, NEAR_REL_CALL = 8,
                          NEAR_IND_CALL = 0x10, NEAR_RET = 0x20, NEAR_IND_JMP = 0x40,
                          NEAR_REL_JMP = 0x80, EN_CALLSTACK = 0x200;
inline constexpr uint64_t MISPRED = 1ull << 63;
inline constexpr uint64_t LBR_FRZ = 1ull << 58;

class Lbr : public ArchPmuTest {
 protected:
  void SetUp() override {
    Config c;
    c.lbr = true;
    make(c);
  }
  static RetiredInstruction taken(BranchKind kind, uint64_t from, uint64_t to, uint8_t cpl = 3,
                                  bool indirect = false) {
    RetiredInstruction i = insn(cpl);
    i.rip = from;
    i.branch.kind = kind;
    i.branch.taken = true;
    i.branch.next_rip = to;
    i.branch.indirect = indirect;
    return i;
  }
  // The newest entries, from TOS down, as (FROM, TO).
  std::vector<std::pair<uint64_t, uint64_t>> newest(int n) {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    const uint64_t tos = rd(LBR_TOS);
    for (int k = 0; k < n; ++k) {
      const uint32_t x = static_cast<uint32_t>((tos - k) & 31);
      out.emplace_back(rd(LBR_FROM0 + x), rd(LBR_TO0 + x));
    }
    return out;
  }
};

TEST_F(Lbr, CapabilitiesSayFormat5AndTheMsrsExist) {
  EXPECT_EQ(rd(IA32_PERF_CAPABILITIES) & 0x3F, 5u);
  make();  // no LBR: format 0, every LBR MSR #GP
  EXPECT_EQ(rd(IA32_PERF_CAPABILITIES) & 0x3F, 0u);
  for (uint32_t msr : {LBR_SELECT, LBR_TOS, LBR_FROM0, LBR_TO0 + 31, LBR_INFO0 + 5}) {
    gp(msr, 0);
    uint64_t v = 0;
    EXPECT_EQ(pmu().rdmsr(msr, v), MsrResult::kGeneralProtection) << std::hex << msr;
  }
}

// Linux's check_msr: read, write the value XOR a mask, read it back (else it runs without LBR).
TEST_F(Lbr, TheMsrsReadBackWhatLinuxProbesThemWith) {
  ok(LBR_TOS, 0x3);
  EXPECT_EQ(rd(LBR_TOS), 0x3u);
  for (uint32_t x = 0; x < 32; ++x) {
    ok(LBR_FROM0 + x, 0xFFFF);
    ok(LBR_TO0 + x, 0xFFFF);
    EXPECT_EQ(rd(LBR_FROM0 + x), 0xFFFFu);
    EXPECT_EQ(rd(LBR_TO0 + x), 0xFFFFu);
  }
  ok(LBR_FROM0, 0x9FFFFFFF81000000);  // bits 62:61 cleared by Linux's TSX-less quirk: kept
  EXPECT_EQ(rd(LBR_FROM0), 0x9FFFFFFF81000000u);
  ok(LBR_SELECT, 0x11);
  EXPECT_EQ(rd(LBR_SELECT), 0x11u);
  ok(LBR_INFO0 + 3, MISPRED | 0x1234);
  EXPECT_EQ(rd(LBR_INFO0 + 3), MISPRED | 0x1234);
  gp(LBR_TOS, 32);
  gp(LBR_SELECT, 1ull << 10);
  gp(LBR_INFO0, 1ull << 16);
  EXPECT_EQ(rd(LBR_TOS), 0x3u);
}

TEST_F(Lbr, TakenBranchesAreRecordedOnlyWhileDebugctlLbrIsSet) {
  retire(taken(BranchKind::kDirectJump, 0x401000, 0x402000));
  EXPECT_EQ(rd(LBR_TOS), 0u) << "DEBUGCTL.LBR clear: nothing";
  EXPECT_FALSE(pmu().wants_events());
  pmu().set_debugctl(DEBUGCTL_LBR);
  EXPECT_TRUE(pmu().wants_events());
  EXPECT_TRUE(pmu().wants_kernel_events()) << "LBR_SELECT suppresses no ring";
  EXPECT_FALSE(pmu().unseen_allowance().admits({1, 0}));
  retire(taken(BranchKind::kDirectJump, 0x401000, 0x402000));
  RetiredInstruction not_taken = branch(BranchKind::kConditional, false);
  retire(not_taken);
  retire(insn());
  retire(taken(BranchKind::kConditional, 0x402010, 0x401000));
  EXPECT_EQ(rd(LBR_TOS), 2u);
  EXPECT_EQ(newest(2), (std::vector<std::pair<uint64_t, uint64_t>>{{0x402010, 0x401000},
                                                                   {0x401000, 0x402000}}));
}

TEST_F(Lbr, SelectSuppressesByRingAndKind) {
  pmu().set_debugctl(DEBUGCTL_LBR);
  ok(LBR_SELECT, CPL_EQ_0 | JCC | NEAR_IND_CALL | NEAR_REL_JMP);
  EXPECT_FALSE(pmu().wants_kernel_events());
  retire(taken(BranchKind::kDirectJump, 0x1, 0x2, 0));   // ring 0: suppressed
  retire(taken(BranchKind::kConditional, 0x3, 0x4));     // Jcc
  retire(taken(BranchKind::kCall, 0x5, 0x6, 3, true));   // indirect call
  retire(taken(BranchKind::kDirectJump, 0x7, 0x8));      // relative jump
  retire(taken(BranchKind::kCall, 0x10, 0x11));          // relative call: recorded
  retire(taken(BranchKind::kIndirectJump, 0x12, 0x13));  // indirect jump: recorded
  retire(taken(BranchKind::kReturn, 0x14, 0x15));        // return: recorded
  EXPECT_EQ(rd(LBR_TOS), 3u);
  EXPECT_EQ(newest(3),
            (std::vector<std::pair<uint64_t, uint64_t>>{{0x14, 0x15}, {0x12, 0x13}, {0x10, 0x11}}));
  ok(LBR_SELECT, CPL_NEQ_0 | NEAR_RET | NEAR_REL_CALL | NEAR_IND_JMP);
  retire(taken(BranchKind::kReturn, 0x20, 0x21));
  retire(taken(BranchKind::kCall, 0x22, 0x23));
  EXPECT_EQ(rd(LBR_TOS), 3u) << "user branches suppressed";
  retire(taken(BranchKind::kCall, 0x24, 0x25, 0, true));  // ring 0, indirect call: recorded
  EXPECT_EQ(rd(LBR_TOS), 4u);
}

TEST_F(Lbr, EntriesWrapAt32) {
  pmu().set_debugctl(DEBUGCTL_LBR);
  for (uint64_t k = 0; k < 40; ++k) retire(taken(BranchKind::kDirectJump, 0x1000 + k, 0x2000 + k));
  EXPECT_EQ(rd(LBR_TOS), 40u % 32);
  EXPECT_EQ(newest(1)[0], std::make_pair(uint64_t{0x1000 + 39}, uint64_t{0x2000 + 39}));
  EXPECT_EQ(newest(32)[31], std::make_pair(uint64_t{0x1000 + 8}, uint64_t{0x2000 + 8}));
}

// LBR_INFO: MISPRED from the predictor, and the cycles since the previous entry (each
// instruction's modelled cycles, the branch's own included).
TEST_F(Lbr, InfoHoldsMispredictionAndCycles) {
  pmu().set_debugctl(DEBUGCTL_LBR);
  EXPECT_TRUE(pmu().reads_branch_predictions());
  RetiredInstruction b = taken(BranchKind::kConditional, 0x10, 0x20);
  b.branch.prediction_valid = true;
  b.branch.predicted_correctly = false;
  retire(b);
  retire(insn(3, 5), 2);
  b.branch.predicted_correctly = true;
  retire(b);
  EXPECT_EQ(rd(LBR_INFO0 + 1), MISPRED | 1);
  EXPECT_EQ(rd(LBR_INFO0 + 2), 11u);
}

// Call-stack mode as Linux's --call-graph lbr programs it (calls and returns only, user only):
// the entries from TOS down are the calls not yet returned from.
TEST_F(Lbr, CallStackModePushesCallsAndPopsReturns) {
  pmu().set_debugctl(DEBUGCTL_LBR);
  ok(LBR_SELECT, EN_CALLSTACK | CPL_EQ_0 | JCC | NEAR_IND_JMP | NEAR_REL_JMP);
  retire(taken(BranchKind::kCall, 0x100, 0x1000));   // main -> a
  retire(taken(BranchKind::kCall, 0x1010, 0x2000));  // a -> b
  retire(taken(BranchKind::kConditional, 0x2004, 0x2000));
  retire(taken(BranchKind::kCall, 0x2010, 0x3000));           // b -> c
  retire(taken(BranchKind::kReturn, 0x3010, 0x2015));         // c returns
  retire(taken(BranchKind::kCall, 0x2020, 0x4000, 3, true));  // b -> d (indirect)
  EXPECT_EQ(rd(LBR_TOS), 3u);
  EXPECT_EQ(newest(3), (std::vector<std::pair<uint64_t, uint64_t>>{
                           {0x2020, 0x4000}, {0x1010, 0x2000}, {0x100, 0x1000}}));
}

// FREEZE_LBRS_ON_PMI: version 4 sets LBR_Frz with the PMI and the records stop until software
// clears it; the PMI's own branch is recorded first. Versions 2-3 clear DEBUGCTL.LBR instead.
TEST_F(Lbr, FreezeOnPmi) {
  pmu().set_debugctl(DEBUGCTL_LBR | FREEZE_LBRS_ON_PMI);
  ok(IA32_PMC0, kMask48);  // one branch to its PMI
  ok(IA32_PERFEVTSEL0, BR_ALL | USR | INT | EN);
  retire(taken(BranchKind::kDirectJump, 0x10, 0x20));
  EXPECT_EQ(sink_.pmis, 1);
  EXPECT_EQ(rd(LBR_TOS), 1u) << "the PMI's branch is in";
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_STATUS) & LBR_FRZ, LBR_FRZ);
  retire(taken(BranchKind::kDirectJump, 0x30, 0x40));
  EXPECT_EQ(rd(LBR_TOS), 1u) << "frozen";
  ok(IA32_PERF_GLOBAL_STATUS_RESET, LBR_FRZ | 1);
  retire(taken(BranchKind::kDirectJump, 0x50, 0x60));
  EXPECT_EQ(rd(LBR_TOS), 2u);

  Config v3;
  v3.version = 3;
  v3.lbr = true;
  make(v3);
  pmu().set_debugctl(DEBUGCTL_LBR | FREEZE_LBRS_ON_PMI);
  ok(IA32_PMC0, kMask48);
  ok(IA32_PERFEVTSEL0, BR_ALL | USR | INT | EN);
  retire(taken(BranchKind::kDirectJump, 0x10, 0x20));
  EXPECT_EQ(pmu().state().debugctl & DEBUGCTL_LBR, 0u) << "legacy freeze: LBR cleared";
  retire(taken(BranchKind::kDirectJump, 0x30, 0x40));
  EXPECT_EQ(rd(LBR_TOS), 1u);
}

TEST_F(Lbr, StateCarriesTheRecordsAndRefusesWhatDoesNotFit) {
  pmu().set_debugctl(DEBUGCTL_LBR);
  retire(taken(BranchKind::kDirectJump, 0x10, 0x20));
  const ArchPmuState s = pmu().state();
  pmu().reset();
  EXPECT_EQ(rd(LBR_TOS), 0u);
  ASSERT_TRUE(pmu().load_state(s).ok());
  EXPECT_EQ(newest(1)[0], std::make_pair(uint64_t{0x10}, uint64_t{0x20}));
  ArchPmuState bad = s;
  bad.lbr.tos = 32;
  EXPECT_FALSE(pmu().load_state(bad).ok());
  bad = s;
  bad.lbr.info[0] = 1ull << 20;
  EXPECT_FALSE(pmu().load_state(bad).ok());
  make();  // no LBR: neither the records nor DEBUGCTL.LBR fit
  EXPECT_FALSE(pmu().load_state(s).ok());
}

}  // namespace
}  // namespace pmu::arch_perfmon::testing
