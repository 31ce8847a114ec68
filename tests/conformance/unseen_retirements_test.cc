// Batches of unseen instructions (DESIGN §4.11, the host backend) on the LWP unit: which events
// allow them, up to where, and that a batch leaves the unit (state, memory, records) exactly as
// retiring its instructions one by one would.
#include <random>
#include <stdexcept>

#include "tests/conformance/lwp_fixture.h"

namespace pmu::lwp::conformance {
namespace {

constexpr uint8_t kInstructions = 1, kBranches = 2, kDcache = 3;

class LwpUnseen : public LwpFixture {};

TEST_F(LwpUnseen, NoLwpcbAllowsAnythingAndCountsNothing) {
  caps = FullCaps();
  MakeUnit();
  EXPECT_EQ(unit->unseen_allowance(), UnseenAllowance{});
  unit->retire_unseen({.instructions = 1u << 20, .branches = 1000});
  EXPECT_EQ(unit->stats(), UnitStats{});
}

TEST_F(LwpUnseen, InstructionsRetiredAllowsUpToTheRecord) {
  caps = FullCaps();
  Start({.slots = {{kInstructions, 100, 0}}});
  unit->enter_user();
  const UnseenAllowance a = unit->unseen_allowance();
  ASSERT_TRUE(a.possible);
  EXPECT_EQ(a.instructions, 100u) << "the 100th instruction stores the record";
  EXPECT_EQ(a.branches, UINT64_MAX);
  unit->retire_unseen({.instructions = 99, .branches = 30});
  EXPECT_TRUE(stored.empty());
  EXPECT_EQ(unit->unseen_allowance().instructions, 1u);
  EXPECT_THROW(unit->retire_unseen({.instructions = 1}), std::logic_error);
  unit->retire(Plain(RipOf(7)));
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(ParseRecord(Bytes(stored[0].bytes)).rip, RipOf(7));
  EXPECT_EQ(unit->unseen_allowance().instructions, 100u) << "reloaded from the interval";
}

// A record store that faulted leaves the counter frozen at zero: the next instruction stores it.
TEST_F(LwpUnseen, AFrozenCounterShowsAtTheNextInstruction) {
  caps = FullCaps();
  Start({.slots = {{kInstructions, 10, 0}}});
  unit->enter_user();
  mem.unmap(kBufferAddr, 0x8000);
  RetirePlain(0, 10);
  ASSERT_EQ(unit->stats().page_faults, 1u);
  const UnseenAllowance a = unit->unseen_allowance();
  EXPECT_EQ(a.instructions, 1u) << "no instruction may go unseen, the empty batch may";
  EXPECT_TRUE(a.admits({}));
  EXPECT_FALSE(a.admits({.instructions = 1}));
}

TEST_F(LwpUnseen, EventsThatNeedEachInstructionAllowNone) {
  caps = FullCaps();
  // Branch records carry the predictor's verdict, trained by every branch; DCache needs every
  // access.
  for (uint8_t id : {kBranches, kDcache}) {
    SCOPED_TRACE(static_cast<int>(id));
    MakeUnit();
    Start({.slots = {{kInstructions, 100, 0}, {id, 100, 0}}});
    unit->enter_user();
    EXPECT_EQ(unit->unseen_allowance(), UnseenAllowance::none());
    EXPECT_THROW(unit->retire_unseen({.instructions = 1}), std::logic_error);
  }
}

// Only a BranchesRetired slot reads the branch predictor's verdicts (its records' PRD bits), and
// an LWPCB whose events are not known yet; then no instruction may go unseen.
TEST_F(LwpUnseen, BranchRecordsReadThePredictor) {
  caps = FullCaps();
  Start({.slots = {{kInstructions, 100, 0}}});
  unit->enter_user();
  EXPECT_FALSE(unit->reads_branch_predictions());
  Reload(kLwpcbAddr, {.slots = {{kInstructions, 100, 0}, {kBranches, 100, 0}}});
  unit->enter_user();
  EXPECT_TRUE(unit->reads_branch_predictions());
  EXPECT_FALSE(unit->unseen_allowance().possible);
  ASSERT_EQ(Llwpcb(0), MsrResult::kOk);
  EXPECT_FALSE(unit->reads_branch_predictions());
}

// An implementation that captures no branch prediction (Capabilities::branch_prediction false):
// branch records need no predictor, and BranchesRetired allows a batch up to its record, in
// branches, unless NDB needs each branch's kind.
TEST_F(LwpUnseen, BranchesWithoutPredictionAllowBranchesUpToTheRecord) {
  caps = FullCaps();
  caps.branch_prediction = false;
  Start({.slots = {{kInstructions, 100, 0}, {kBranches, 30, 0}}});
  unit->enter_user();
  EXPECT_FALSE(unit->reads_branch_predictions());
  UnseenAllowance a = unit->unseen_allowance();
  ASSERT_TRUE(a.possible);
  EXPECT_EQ(a.instructions, 100u);
  EXPECT_EQ(a.branches, 30u);
  unit->retire_unseen({.instructions = 50, .branches = 29});
  EXPECT_TRUE(stored.empty());
  a = unit->unseen_allowance();
  EXPECT_EQ(a.instructions, 50u);
  EXPECT_EQ(a.branches, 1u);
  unit->retire(Branch(RipOf(3), BranchKind::kConditional, true, 0, /*pred_valid=*/false));
  ASSERT_EQ(stored.size(), 1u);
  const Rec r = ParseRecord(Bytes(stored[0].bytes));
  EXPECT_EQ(r.id, kBranches);
  EXPECT_EQ(r.rip, RipOf(3));
  EXPECT_EQ(r.dword0 >> 29 & 1, 0u) << "PRD valid clear";
  Reload(kLwpcbAddr, {.filters = lwpcb::kFilterNdb, .slots = {{kBranches, 30, 0}}});
  unit->enter_user();
  EXPECT_EQ(unit->unseen_allowance(), UnseenAllowance::none()) << "NDB: each branch's kind";
}

TEST_F(LwpUnseen, AnLwpcbAwaitingInitialisationNeedsItsFirstInstruction) {
  caps = FullCaps();
  MakeUnit();
  SetMsr0(kMsr0AllFeatures | msr0_vector(kVector));
  PokeLwpcb(mem, kLwpcbAddr, {.slots = {{kInstructions, 100, 0}}});
  ASSERT_EQ(Llwpcb(kLwpcbAddr, 0), MsrResult::kOk);  // at CPL 0: initialised in ring 3
  EXPECT_EQ(unit->unseen_allowance(), UnseenAllowance::none());
  EXPECT_TRUE(unit->reads_branch_predictions()) << "its events are not known yet";
  EXPECT_TRUE(unit->counts_cache_misses());
  unit->enter_user();
  EXPECT_EQ(unit->unseen_allowance().instructions, 100u);
}

// Two units over two copies of memory, loaded alike: one takes batches, the other each
// instruction of them (plain ones, branches, loads that miss: details the allowed event ignores).
// Random intervals and Random bits (the PRNG reloads counters at each record), small rings with a
// threshold, and a consumer that sometimes frees the ring.
TEST(LwpUnseenDifferential, ABatchEqualsItsInstructionsOneByOne) {
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    struct Side {
      FakeGuestMemory mem;
      RecordingInterruptSink sink;
      RecordingPageFaultSink faults;
      std::unique_ptr<LwpUnit> unit;
      std::vector<StoredRecord> records;
    } batched, each;
    Capabilities caps = FullCaps();
    // Half the seeds: no prediction captured, and a BranchesRetired slot counts too.
    caps.branch_prediction = seed % 2 == 0;
    const UnitConfig config{.core_id = 3, .seed = seed};
    const uint32_t interval = 1 + static_cast<uint32_t>(rng() % 70);
    CbSpec cb{.flags = 1,
              .buffer_size = 32 * (2 + static_cast<uint32_t>(rng() % 6)),
              .random = static_cast<uint8_t>(rng() % 4),
              .threshold = 32,
              .slots = {{kInstructions, interval, static_cast<uint32_t>(rng() % 80)}}};
    if (!caps.branch_prediction)
      cb.slots.push_back(
          {kBranches, 1 + static_cast<uint32_t>(rng() % 20), static_cast<uint32_t>(rng() % 30)});
    for (Side* side : {&batched, &each}) {
      side->mem.map(kLwpcbAddr, 0x2000);
      side->mem.map(kBufferAddr, 0x8000);
      side->unit = std::make_unique<LwpUnit>(caps, config, side->mem, side->sink, &side->faults);
      side->unit->set_record_observer(
          [side](const StoredRecord& r) { side->records.push_back(r); });
      ASSERT_EQ(
          side->unit->write_msr(kMsrLwpFeatureEnable, kMsr0AllFeatures | msr0_vector(kVector), 0),
          MsrResult::kOk);
      PokeLwpcb(side->mem, kLwpcbAddr, cb);
      ASSERT_EQ(side->unit->write_msr(kMsrLwpControlBlock, kLwpcbAddr, 3), MsrResult::kOk);
      side->unit->enter_user();
    }
    int rip = 0;
    for (int round = 0; round < 60; ++round) {
      const UnseenAllowance a = batched.unit->unseen_allowance();
      ASSERT_EQ(a, each.unit->unseen_allowance());
      ASSERT_TRUE(a.possible);
      // Unseen instructions never reach the stepper's models: nothing may read them then.
      ASSERT_FALSE(batched.unit->counts_cache_misses() || batched.unit->reads_branch_predictions());
      const uint64_t n = a.instructions == 0 ? 0 : rng() % std::min<uint64_t>(a.instructions, 200);
      const uint64_t b = std::min(a.branches, n + 1) == 0 ? 0 : rng() % std::min(a.branches, n + 1);
      SCOPED_TRACE("round " + std::to_string(round) + ": allowance " +
                   std::to_string(a.instructions) + "/" + std::to_string(a.branches) + ", batch " +
                   std::to_string(n) + "/" + std::to_string(b));
      ASSERT_TRUE(a.admits({.instructions = n, .branches = b}));
      ASSERT_NO_THROW(batched.unit->retire_unseen({.instructions = n, .branches = b}));
      // The same instructions one by one: b branches of any kind at random places, the others
      // plain or loads that miss.
      static constexpr BranchKind kKinds[] = {BranchKind::kConditional, BranchKind::kDirectJump,
                                              BranchKind::kIndirectJump, BranchKind::kCall,
                                              BranchKind::kReturn};
      uint64_t branches_left = b;
      for (uint64_t i = 0; i < n; ++i, ++rip) {
        if (branches_left > 0 && (n - i == branches_left || rng() % 2 == 0)) {
          --branches_left;
          each.unit->retire(Branch(RipOf(rip), kKinds[rng() % 5], rng() % 2));
        } else if (rng() % 2) {
          each.unit->retire(Plain(RipOf(rip)));
        } else {
          each.unit->retire(Load(RipOf(rip), 0x30000, 300, DataSource::kDram));
        }
      }
      ASSERT_EQ(each.records.size(), batched.records.size()) << "an allowed batch stores nothing";
      ASSERT_EQ(batched.unit->state(), each.unit->state());
      // One instruction both see (it may store a record, raise the threshold interrupt).
      const RetiredInstruction seen =
          rng() % 2 ? Plain(RipOf(rip)) : Branch(RipOf(rip), BranchKind::kConditional, true);
      batched.unit->retire(seen);
      each.unit->retire(seen);
      ++rip;
      ASSERT_EQ(batched.unit->state(), each.unit->state());
      ASSERT_EQ(batched.sink.vectors, each.sink.vectors);
      ASSERT_EQ(batched.mem.peek(kBufferAddr, cb.buffer_size),
                each.mem.peek(kBufferAddr, cb.buffer_size));
      ASSERT_EQ(batched.mem.peek(kLwpcbAddr, 64), each.mem.peek(kLwpcbAddr, 64));
      if (rng() % 4 == 0) {  // the consumer catches up: tail = head
        for (Side* side : {&batched, &each}) {
          const auto head = side->mem.peek(kLwpcbAddr + 16, 4);
          side->mem.poke_u32(kLwpcbAddr + 20, static_cast<uint32_t>(Le(head.data(), 4)));
        }
      }
    }
    EXPECT_EQ(batched.unit->stats(), each.unit->stats());
  }
}

}  // namespace
}  // namespace pmu::lwp::conformance
