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
    const Capabilities caps = FullCaps();
    const UnitConfig config{.core_id = 3, .seed = seed};
    const uint32_t interval = 1 + static_cast<uint32_t>(rng() % 70);
    CbSpec cb{.flags = 1,
              .buffer_size = 32 * (2 + static_cast<uint32_t>(rng() % 6)),
              .random = static_cast<uint8_t>(rng() % 4),
              .threshold = 32,
              .slots = {{kInstructions, interval, static_cast<uint32_t>(rng() % 80)}}};
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
      ASSERT_FALSE(batched.unit->counts_cache_misses() ||
                   batched.unit->reads_branch_predictions());
      const uint64_t n = a.instructions == 0 ? 0 : rng() % a.instructions;
      batched.unit->retire_unseen({.instructions = n, .branches = n / 3});
      for (uint64_t i = 0; i < n; ++i, ++rip) {
        switch (rng() % 3) {
          case 0:
            each.unit->retire(Plain(RipOf(rip)));
            break;
          case 1:
            each.unit->retire(Branch(RipOf(rip), BranchKind::kConditional, rng() % 2));
            break;
          default:
            each.unit->retire(Load(RipOf(rip), 0x30000, 300, DataSource::kDram));
            break;
        }
      }
      ASSERT_EQ(each.records.size(), batched.records.size()) << "an allowed batch stores nothing";
      ASSERT_EQ(batched.unit->state(), each.unit->state());
      // One instruction both see (it may store the record, raise the threshold interrupt).
      batched.unit->retire(Plain(RipOf(rip)));
      each.unit->retire(Plain(RipOf(rip)));
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
