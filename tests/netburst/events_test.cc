// Exact counts of the modelled events for known instruction streams, per event and mask, and
// the CPL / thread qualifications.
#include "pmu/netburst/events.h"
#include "tests/netburst/netburst_fixture.h"

namespace pmu::netburst::testing {
namespace {

using NetburstEvents = NetburstTest;

// A stream with 6 user instructions, 4 kernel instructions, 3 branches, 2 misses.
std::vector<RetiredInstruction> MixedStream() {
  std::vector<RetiredInstruction> s;
  s.push_back(Plain(3));
  s.push_back(Plain(0));
  s.push_back(Branch(true, false, 3));
  s.push_back(Plain(1));  // CPL 1 is "user" for T0_USR
  s.push_back(Branch(false, true, 0));
  s.push_back(Load({DataSource::kL2}, 3));
  s.push_back(Plain(0));
  s.push_back(Branch(true, true, 3));
  s.push_back(Load({DataSource::kDram}, 0));
  s.push_back(Plain(2));
  return s;
}

void RunAll(NetburstPmu& pmu, const std::vector<RetiredInstruction>& s) {
  for (const auto& i : s) pmu.retire(i);
}

TEST_F(NetburstEvents, InstrRetiredNbogusntagCountsEveryInstruction) {
  Program(kIqCounter0, kCruEscr0, MakeEscr(kInstrRetired, 0x1, true, true), MakeCccr(kSelCru01));
  RunAll(pmu, MixedStream());
  EXPECT_EQ(Count(kIqCounter0), 10u);
}

TEST_F(NetburstEvents, InstrRetiredT0UsrCountsCpl1To3Only) {
  Program(kIqCounter0, kCruEscr0, MakeEscr(kInstrRetired, 0x1, false, true), MakeCccr(kSelCru01));
  RunAll(pmu, MixedStream());
  EXPECT_EQ(Count(kIqCounter0), 6u);
}

TEST_F(NetburstEvents, InstrRetiredT0OsCountsCpl0Only) {
  Program(kIqCounter2, kCruEscr1, MakeEscr(kInstrRetired, 0x1, true, false), MakeCccr(kSelCru01));
  RunAll(pmu, MixedStream());
  EXPECT_EQ(Count(kIqCounter2), 4u);
}

TEST_F(NetburstEvents, NeitherOsNorUsrCountsNothing) {
  Program(kIqCounter0, kCruEscr0, MakeEscr(kInstrRetired, 0x1, false, false), MakeCccr(kSelCru01));
  RunAll(pmu, MixedStream());
  EXPECT_EQ(Count(kIqCounter0), 0u);
}

TEST_F(NetburstEvents, T1BitsAreInertOnASingleThreadProfile) {
  Program(kIqCounter0, kCruEscr0, MakeEscr(kInstrRetired, 0x1, false, false) | kT1Os | kT1Usr,
          MakeCccr(kSelCru01));
  RunAll(pmu, MixedStream());
  EXPECT_EQ(Count(kIqCounter0), 0u);
  // libpfm4 and Linux set T1 bits along with T0 bits; that must not double anything.
  Program(kIqCounter0, kCruEscr0, MakeEscr(kInstrRetired, 0x1, true, true) | kT1Os | kT1Usr,
          MakeCccr(kSelCru01));
  RunAll(pmu, MixedStream());
  EXPECT_EQ(Count(kIqCounter0), 10u);
}

TEST_F(NetburstEvents, InstrRetiredTaggedAndBogusMasksCountZero) {
  for (unsigned mask : {0x2u, 0x4u, 0x8u, 0xEu, 0xFFF0u}) {
    Program(kIqCounter0, kCruEscr0, MakeEscr(kInstrRetired, mask, true, true) | kTagEnable,
            MakeCccr(kSelCru01));
    RunAll(pmu, MixedStream());
    EXPECT_EQ(Count(kIqCounter0), 0u) << "mask " << mask;
  }
  // OR of masks: NBOGUSNTAG|NBOGUSTAG counts each instruction once.
  Program(kIqCounter0, kCruEscr0, MakeEscr(kInstrRetired, 0x3, true, true), MakeCccr(kSelCru01));
  RunAll(pmu, MixedStream());
  EXPECT_EQ(Count(kIqCounter0), 10u);
}

TEST_F(NetburstEvents, BranchRetiredEachMaskSelectsTakenTimesPredicted) {
  // 2 x not-taken predicted, 3 x not-taken mispredicted, 4 x taken predicted, 5 x taken
  // mispredicted, plus 6 non-branches.
  std::vector<RetiredInstruction> s;
  for (int i = 0; i < 2; ++i) s.push_back(Branch(false, false));
  for (int i = 0; i < 3; ++i) s.push_back(Branch(false, true));
  for (int i = 0; i < 4; ++i) s.push_back(Branch(true, false, 3, BranchKind::kCall));
  for (int i = 0; i < 5; ++i) s.push_back(Branch(true, true, 3, BranchKind::kReturn));
  for (int i = 0; i < 6; ++i) s.push_back(Plain());
  const struct {
    unsigned mask;
    uint64_t expected;
  } kCases[] = {{0x1, 2}, {0x2, 3}, {0x4, 4}, {0x8, 5}, {0x5, 6}, {0xA, 8}, {0xF, 14}, {0x0, 0}};
  for (const auto& c : kCases) {
    Program(kIqCounter1, kCruEscr2, MakeEscr(kBranchRetired, c.mask, true, true),
            MakeCccr(kSelCru23));
    RunAll(pmu, s);
    EXPECT_EQ(Count(kIqCounter1), c.expected) << "mask " << c.mask;
  }
}

TEST_F(NetburstEvents, BranchWithoutPredictionCountsAsPredicted) {
  RetiredInstruction b = Branch(true, false);
  b.branch.prediction_valid = false;
  b.branch.predicted_correctly = false;
  Program(kIqCounter1, kCruEscr2, MakeEscr(kBranchRetired, 0x4, true, true), MakeCccr(kSelCru23));
  Program(kIqCounter3, kCruEscr3, MakeEscr(kBranchRetired, 0x8, true, true), MakeCccr(kSelCru23));
  Run(b, 3);
  EXPECT_EQ(Count(kIqCounter1), 3u);
  EXPECT_EQ(Count(kIqCounter3), 0u);
}

TEST_F(NetburstEvents, MispredBranchRetiredCountsMispredictedBranches) {
  Program(kIqCounter0, kCruEscr0, MakeEscr(kMispredBranchRetired, 0x1, true, true),
          MakeCccr(kSelCru01));
  RunAll(pmu, MixedStream());
  EXPECT_EQ(Count(kIqCounter0), 2u);
}

TEST_F(NetburstEvents, GlobalPowerRunningCountsCyclesAtTheQualifiedCpl) {
  Program(kBpuCounter0, kFsbEscr0, MakeEscr(kGlobalPower, 0x1, false, true), MakeCccr(kSelFsb));
  Program(kBpuCounter2, kFsbEscr1, MakeEscr(kGlobalPower, 0x1, true, true), MakeCccr(kSelFsb));
  Run(Plain(3, 5));
  Run(Plain(0, 7));
  Run(Plain(3, 0));  // cycles 0 is taken as 1
  Run(Load({DataSource::kDram}, 3, 300));
  EXPECT_EQ(Count(kBpuCounter0), 5u + 1 + 300);
  EXPECT_EQ(Count(kBpuCounter2), 5u + 7 + 1 + 300);
}

TEST_F(NetburstEvents, GlobalPowerWithoutRunningMaskCountsNothing) {
  Program(kBpuCounter1, kFsbEscr0, MakeEscr(kGlobalPower, 0x2, true, true), MakeCccr(kSelFsb));
  Run(Plain(3, 5), 3);
  EXPECT_EQ(Count(kBpuCounter1), 0u);
}

struct BsqCase {
  const char* name;
  unsigned mask;
  uint64_t no_l3;    // expected count without a 3rd-level cache
  uint64_t with_l3;  // with one
};

class NetburstBsq : public ::testing::TestWithParam<BsqCase> {};

TEST_P(NetburstBsq, BsqCacheReferenceMaskCountsFromL1dMisses) {
  const BsqCase& c = GetParam();
  // Misses: 3 x L2, 2 x L3, 4 x DRAM (one instruction has two), 1 x remote, 1 x MMIO.
  std::vector<RetiredInstruction> s = {Load({DataSource::kL2}),
                                       Load({DataSource::kL2, DataSource::kDram}),
                                       Load({DataSource::kL2}),
                                       Load({DataSource::kLocalL3}),
                                       Load({DataSource::kLocalL3}, 0),
                                       Load({DataSource::kDram}),
                                       Load({DataSource::kDram, DataSource::kDram}),
                                       Load({DataSource::kRemoteCache}),
                                       Load({DataSource::kOther}),
                                       Plain()};
  for (bool l3 : {false, true}) {
    Config config;
    config.third_level_cache = l3;
    RecordingInterruptSink sink;
    NetburstPmu pmu(config, sink);
    ASSERT_EQ(pmu.wrmsr(0x3A1, MakeEscr(kBsqCacheRef, c.mask, true, true)), MsrResult::kOk);
    ASSERT_EQ(pmu.wrmsr(0x362, MakeCccr(kSelBsu)), MsrResult::kOk);  // BPU_CCCR2 -> BSU_ESCR1
    for (const auto& i : s) pmu.retire(i);
    uint64_t v = 0;
    ASSERT_EQ(pmu.rdmsr(0x302, v), MsrResult::kOk);
    EXPECT_EQ(v, l3 ? c.with_l3 : c.no_l3) << c.name << (l3 ? " with L3" : " without L3");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Masks, NetburstBsq,
    ::testing::Values(BsqCase{"RD_2ndL_HITS", 0x001, 0, 0}, BsqCase{"RD_2ndL_HITE", 0x002, 3, 3},
                      BsqCase{"RD_2ndL_HITM", 0x004, 0, 0}, BsqCase{"RD_3rdL_HITS", 0x008, 0, 0},
                      BsqCase{"RD_3rdL_HITE", 0x010, 0, 2}, BsqCase{"RD_3rdL_HITM", 0x020, 0, 0},
                      BsqCase{"RD_2ndL_MISS", 0x100, 7, 7}, BsqCase{"RD_3rdL_MISS", 0x200, 0, 5},
                      BsqCase{"WR_2ndL_MISS", 0x400, 0, 0}, BsqCase{"all 2ndL hits", 0x007, 3, 3},
                      BsqCase{"2ndL hit or miss", 0x107, 10, 10},
                      BsqCase{"3rdL miss or 2ndL miss", 0x300, 7, 7},
                      BsqCase{"undefined bits", 0xF8C0, 0, 0}),
    [](const ::testing::TestParamInfo<BsqCase>& param_info) {
      std::string n = param_info.param.name;
      for (char& ch : n)
        if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

TEST_F(NetburstEvents, UnmodelledEventsCountNothing) {
  // retired_branch_type (TBPU_ESCR0, event 4) on MS counter 0 via select 2; uops_retired
  // (CRU_ESCR0, event 1); an event select no ESCR defines (0x3F).
  Program(kMsCounter0, kTbpuEscr0, MakeEscr(0x04, 0x1E, true, true), MakeCccr(2));
  Program(kIqCounter0, kCruEscr0, MakeEscr(0x01, 0x3, true, true), MakeCccr(kSelCru01));
  Program(kIqCounter2, kCruEscr1, MakeEscr(0x3F, 0xFFFF, true, true), MakeCccr(kSelCru01));
  RunAll(pmu, MixedStream());
  EXPECT_EQ(Count(kMsCounter0), 0u);
  EXPECT_EQ(Count(kIqCounter0), 0u);
  EXPECT_EQ(Count(kIqCounter2), 0u);
  EXPECT_EQ(pmu.counter_view(kMsCounter0).event->name, "retired_branch_type");
  EXPECT_EQ(pmu.counter_view(kIqCounter2).event, nullptr);
  EXPECT_TRUE(pmu.counter_view(kIqCounter2).counting);
}

TEST_F(NetburstEvents, ActiveThreadNoneOrBothCountsNothingSingleOrAnyCounts) {
  const uint64_t base = kEnable | (uint64_t{kSelCru01} << 13);
  const struct {
    uint64_t thread;
    uint64_t expected;
  } kCases[] = {{0u << 16, 0}, {1u << 16, 10}, {2u << 16, 0}, {3u << 16, 10}};
  for (const auto& c : kCases) {
    Program(kIqCounter0, kCruEscr0, MakeEscr(kInstrRetired, 1, true, true), base | c.thread);
    RunAll(pmu, MixedStream());
    EXPECT_EQ(Count(kIqCounter0), c.expected) << "active thread " << (c.thread >> 16);
  }
}

TEST_F(NetburstEvents, DisabledCounterCountsNothingAndWantsNoEvents) {
  Program(kIqCounter0, kCruEscr0, MakeEscr(kInstrRetired, 1, true, true),
          MakeCccr(kSelCru01) & ~kEnable, 42);
  EXPECT_FALSE(pmu.wants_events());
  RunAll(pmu, MixedStream());
  EXPECT_EQ(Count(kIqCounter0), 42u);
  Wr(kCccr(kIqCounter0), MakeCccr(kSelCru01));
  EXPECT_TRUE(pmu.wants_events());
  RunAll(pmu, MixedStream());
  EXPECT_EQ(Count(kIqCounter0), 52u);
}

TEST_F(NetburstEvents, EventTableHas45EventsWithConsistentEscrs) {
  EXPECT_EQ(event_table().size(), 45u);
  int modelled = 0;
  for (const EventInfo& e : event_table()) {
    ASSERT_GE(e.escr_count, 1);
    for (int k = 0; k < e.escr_count; ++k) EXPECT_EQ(find_event(e.escrs[k], e.event_select), &e);
    EXPECT_EQ(find_event(e.name), &e);
    if (e.modelled()) {
      ++modelled;
      // A modelled event's documented select reaches its ESCRs from some counter.
      bool reachable = false;
      for (int c = 0; c < 18; ++c)
        if (escr_for(c, e.escr_select) == e.escrs[0]) reachable = true;
      EXPECT_TRUE(reachable) << e.name;
    }
  }
  EXPECT_EQ(modelled, 5);
}

}  // namespace
}  // namespace pmu::netburst::testing
