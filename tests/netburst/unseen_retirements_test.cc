// Batches of unseen instructions (DESIGN §4.11, the host backend): which counter set-ups allow
// them and how many, and that a batch leaves the PMU exactly as retiring its instructions one by
// one would (differential against retire(), with instructions whose other details vary).
#include <random>
#include <stdexcept>

#include "tests/netburst/netburst_fixture.h"

namespace pmu::netburst::testing {
namespace {

const uint64_t kInstrUser = MakeEscr(kInstrRetired, 1, false, true);        // NBOGUSNTAG
const uint64_t kBranchesUser = MakeEscr(kBranchRetired, 0xF, false, true);  // MMNP..MMTM

class NetburstUnseen : public NetburstTest {};

TEST_F(NetburstUnseen, NothingCountingAllowsAnything) {
  const UnseenAllowance a = pmu.unseen_allowance();
  EXPECT_TRUE(a.possible);
  EXPECT_EQ(a.instructions, UINT64_MAX);
  EXPECT_EQ(a.branches, UINT64_MAX);
  pmu.retire_unseen({.instructions = 1000, .branches = 100});
  EXPECT_EQ(pmu.stats().instructions, 0u) << "no counter counted them";
}

TEST_F(NetburstUnseen, InstrRetiredAllowsInstructionsUpToTheWrap) {
  Program(kIqCounter0, kCruEscr0, kInstrUser, MakeCccr(kSelCru01, kOvfPmiT0), kCounterMask - 9);
  UnseenAllowance a = pmu.unseen_allowance();
  ASSERT_TRUE(a.possible);
  EXPECT_EQ(a.instructions, 10u) << "the 10th instruction wraps the counter";
  EXPECT_EQ(a.branches, UINT64_MAX);
  pmu.retire_unseen({.instructions = 9, .branches = 4});
  EXPECT_EQ(Count(kIqCounter0), kCounterMask);
  EXPECT_EQ(Rd(kCccr(kIqCounter0)) & kOvf, 0u);
  EXPECT_EQ(pmu.stats().instructions, 9u);
  EXPECT_EQ(pmu.unseen_allowance().instructions, 1u) << "now no instruction may go unseen";
  Run(Plain());
  EXPECT_EQ(sink.pmis, 1) << "the wrap shows, at the instruction that wraps";
}

TEST_F(NetburstUnseen, BranchRetiredWithAllFourMasksAllowsBranchesUpToTheWrap) {
  Program(kIqCounter1, kCruEscr2, kBranchesUser, MakeCccr(kSelCru23, kOvfPmiT0), kCounterMask - 2);
  const UnseenAllowance a = pmu.unseen_allowance();
  ASSERT_TRUE(a.possible);
  EXPECT_EQ(a.branches, 3u);
  EXPECT_EQ(a.instructions, UINT64_MAX);
  pmu.retire_unseen({.instructions = 500, .branches = 2});
  EXPECT_EQ(Count(kIqCounter1), kCounterMask);
  EXPECT_EQ(sink.pmis, 0);
}

// One counter set up each way: whether a batch may hold its instructions, and which of the
// stepper's models it reads (the cache: cycles, cache references, Compare; the predictor:
// mispredictions, masks that split a direction by prediction). What reads a model always needs
// each instruction: unseen instructions never reach the models.
TEST_F(NetburstUnseen, EachSetUpSaysWhetherItAllowsABatchAndWhichModelsItReads) {
  struct Case {
    const char* what;
    uint32_t escr_msr;
    uint64_t escr;
    int counter;
    uint64_t cccr;
    bool batch, cache, predictor;
  };
  const Case cases[] = {
      {"instr_retired", kCruEscr0, kInstrUser, kIqCounter0, MakeCccr(kSelCru01), true, false,
       false},
      {"all branches", kCruEscr2, kBranchesUser, kIqCounter1, MakeCccr(kSelCru23), true, false,
       false},
      {"T0_OS: kernel instructions are not in a batch", kCruEscr0,
       MakeEscr(kInstrRetired, 1, true, true), kIqCounter0, MakeCccr(kSelCru01), false, false,
       false},
      {"T0_OS alone", kCruEscr0, MakeEscr(kInstrRetired, 1, true, false), kIqCounter0,
       MakeCccr(kSelCru01), false, false, false},
      {"Compare judges each cycle", kCruEscr0, kInstrUser, kIqCounter0,
       MakeCccr(kSelCru01, kCompare | kComplement), false, true, false},
      {"taken branches: the direction", kCruEscr2, MakeEscr(kBranchRetired, 0xC, false, true),
       kIqCounter1, MakeCccr(kSelCru23), false, false, false},
      {"predicted branches", kCruEscr2, MakeEscr(kBranchRetired, 0x5, false, true), kIqCounter1,
       MakeCccr(kSelCru23), false, false, true},
      {"mispredicted taken branches", kCruEscr2, MakeEscr(kBranchRetired, 0x8, false, true),
       kIqCounter1, MakeCccr(kSelCru23), false, false, true},
      {"mispred_branch_retired", kCruEscr0, MakeEscr(kMispredBranchRetired, 1, false, true),
       kIqCounter0, MakeCccr(kSelCru01), false, false, true},
      {"cycles", kFsbEscr0, MakeEscr(kGlobalPower, 1, false, true), kBpuCounter0, MakeCccr(kSelFsb),
       false, true, false},
      {"cache references", kBsuEscr0, MakeEscr(kBsqCacheRef, 0x100, false, true), kBpuCounter0,
       MakeCccr(kSelBsu), false, true, false},
  };
  EXPECT_FALSE(pmu.reads_cache_model() || pmu.reads_branch_predictions());
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Program(c.counter, c.escr_msr, c.escr, c.cccr);
    EXPECT_EQ(pmu.unseen_allowance().possible, c.batch);
    if (!c.batch) {
      EXPECT_EQ(pmu.unseen_allowance(), UnseenAllowance::none());
      EXPECT_THROW(pmu.retire_unseen({.instructions = 1}), std::logic_error);
    }
    EXPECT_EQ(pmu.reads_cache_model(), c.cache);
    EXPECT_EQ(pmu.reads_branch_predictions(), c.predictor);
    Wr(kCccr(c.counter), 0);
    EXPECT_FALSE(pmu.reads_cache_model() || pmu.reads_branch_predictions()) << "stopped";
  }
}

TEST_F(NetburstUnseen, MasksWithoutTheCountedKindCountNothingAndAllowAnything) {
  // instr_retired counting only bogus (speculative) instructions, and one with neither T0_USR
  // nor T0_OS: a reported user instruction never increments them.
  Program(kIqCounter0, kCruEscr0, MakeEscr(kInstrRetired, 4, false, true), MakeCccr(kSelCru01),
          kCounterMask);
  Program(kIqCounter2, kCruEscr1, MakeEscr(kInstrRetired, 1, false, false), MakeCccr(kSelCru01),
          kCounterMask);
  EXPECT_EQ(pmu.unseen_allowance(), UnseenAllowance{});
  pmu.retire_unseen({.instructions = 100, .branches = 10});
  EXPECT_EQ(Count(kIqCounter0), kCounterMask);
  EXPECT_EQ(Count(kIqCounter2), kCounterMask);
}

TEST_F(NetburstUnseen, ForcedOverflowShowsAtTheNextIncrement) {
  Program(kIqCounter0, kCruEscr0, kInstrUser, MakeCccr(kSelCru01, kForceOvf | kOvfPmiT0));
  EXPECT_EQ(pmu.unseen_allowance().instructions, 1u);
  EXPECT_THROW(pmu.retire_unseen({.instructions = 1}), std::logic_error);
  pmu.retire_unseen({});  // an empty batch is always admitted
  EXPECT_EQ(sink.pmis, 0);
}

class NetburstUnseenSdmTiming : public NetburstTest {
 protected:
  NetburstUnseenSdmTiming() : NetburstTest(SdmPmiTimingConfig()) {}
};

TEST_F(NetburstUnseenSdmTiming, AnArmedPmiShowsAtTheNextIncrement) {
  Program(kIqCounter0, kCruEscr0, kInstrUser, MakeCccr(kSelCru01, kOvfPmiT0), kCounterMask);
  Run(Plain());  // overflows; the PMI waits for the next event count
  ASSERT_EQ(sink.pmis, 0);
  EXPECT_EQ(pmu.unseen_allowance().instructions, 1u);
  Run(Plain());
  EXPECT_EQ(sink.pmis, 1);
  EXPECT_GT(pmu.unseen_allowance().instructions, 1000u);
}

// A user instruction whose details (branch direction, prediction, cycles, cache misses) vary:
// none of them may change what an allowed batch counts.
RetiredInstruction RandomUserInstruction(std::mt19937_64& rng, bool branch) {
  RetiredInstruction i = Plain(3, 1 + static_cast<uint32_t>(rng() % 300));
  i.rip = 0x400000 + (rng() % 0x10000);
  if (branch) {
    static constexpr BranchKind kKinds[] = {BranchKind::kConditional, BranchKind::kDirectJump,
                                            BranchKind::kIndirectJump, BranchKind::kCall,
                                            BranchKind::kReturn};
    i.branch.kind = kKinds[rng() % 5];
    i.branch.taken = i.branch.kind != BranchKind::kConditional || rng() % 2;
    i.branch.prediction_valid = true;
    i.branch.predicted_correctly = rng() % 3 != 0;
  }
  for (int m = 0; m < static_cast<int>(rng() % 3); ++m) {
    i.cache_misses[m].source = static_cast<DataSource>(rng() % 4);
    i.cache_misses[m].data_address = 0x10000 + 64 * m;
    i.cache_misses[m].latency_cycles = static_cast<uint32_t>(rng() % 400);
    i.cache_miss_count = static_cast<uint8_t>(m + 1);
  }
  return i;
}

// Two PMUs programmed alike: one takes batches, the other each instruction of them. Counter set-
// ups are drawn from the countable ones (instr_retired, all-branch branch_retired, masks that
// count nothing, cascades), started at random distances from the wrap, with and without PMIs.
TEST(NetburstUnseenDifferential, ABatchEqualsItsInstructionsOneByOne) {
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    RecordingInterruptSink batch_sink, each_sink;
    Config config;
    if (rng() % 2) config.pmi_timing = PmiTiming::kNextEventCount;
    NetburstPmu batched(config, batch_sink), each(config, each_sink);
    auto both_wrmsr = [&](uint32_t msr, uint64_t value) {
      ASSERT_EQ(batched.wrmsr(msr, value), MsrResult::kOk);
      ASSERT_EQ(each.wrmsr(msr, value), MsrResult::kOk);
    };
    // instr_retired: CRU_ESCR0 (IQ counter 12) and CRU_ESCR1 (14), select 4; branch_retired:
    // CRU_ESCR2 (13) and CRU_ESCR3 (15), select 5.
    struct Slot {
      int counter;
      uint32_t escr_msr;
      unsigned select;
      bool branches;
    };
    const Slot slots[] = {{kIqCounter0, kCruEscr0, kSelCru01, false},
                          {kIqCounter2, kCruEscr1, kSelCru01, false},
                          {kIqCounter1, kCruEscr2, kSelCru23, true},
                          {kIqCounter3, kCruEscr3, kSelCru23, true}};
    for (const Slot& s : slots) {
      if (rng() % 4 == 0) continue;
      const unsigned mask = s.branches ? 0xF : (rng() % 5 == 0 ? 4 : 1);
      both_wrmsr(s.escr_msr, MakeEscr(s.branches ? kBranchRetired : kInstrRetired, mask, false,
                                      rng() % 8 != 0));
      both_wrmsr(kCounter(s.counter), kCounterMask - rng() % 60);
      uint64_t cccr = MakeCccr(s.select, rng() % 2 ? kOvfPmiT0 : 0);
      if (s.counter == kIqCounter2 && rng() % 2) cccr = (cccr & ~kEnable) | kCascade;
      both_wrmsr(kCccr(s.counter), cccr);
    }
    for (int round = 0; round < 40; ++round) {
      const UnseenAllowance a = batched.unseen_allowance();
      ASSERT_EQ(a, each.unseen_allowance());
      ASSERT_TRUE(a.possible);
      // Unseen instructions never reach the stepper's models: nothing may read them then.
      ASSERT_FALSE(batched.reads_cache_model() || batched.reads_branch_predictions());
      const uint64_t max_instructions = std::min<uint64_t>(a.instructions, 80);
      UnseenRetirements batch;
      if (max_instructions > 0) {
        batch.instructions = rng() % max_instructions;
        const uint64_t max_branches = std::min(a.branches, batch.instructions + 1);
        if (max_branches > 0) batch.branches = rng() % max_branches;
      }
      ASSERT_TRUE(a.admits(batch));
      batched.retire_unseen(batch);
      // The same instructions one by one, branches among them at random places.
      uint64_t branches_left = batch.branches;
      for (uint64_t i = 0; i < batch.instructions; ++i) {
        const bool branch =
            branches_left > 0 && (batch.instructions - i == branches_left || rng() % 2 == 0);
        if (branch) --branches_left;
        each.retire(RandomUserInstruction(rng, branch));
        ASSERT_EQ(each_sink.pmis, batch_sink.pmis) << "an allowed batch shows nothing";
      }
      ASSERT_EQ(batched.state(), each.state());
      ASSERT_EQ(batched.stats(), each.stats());
      // Then one instruction seen by both (it may wrap, raise, start a cascade).
      const RetiredInstruction seen = RandomUserInstruction(rng, rng() % 2);
      batched.retire(seen);
      each.retire(seen);
      ASSERT_EQ(batched.state(), each.state());
      ASSERT_EQ(batch_sink.pmis, each_sink.pmis);
    }
  }
}

}  // namespace
}  // namespace pmu::netburst::testing
