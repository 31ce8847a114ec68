// Conformance: counting and record selection of the LWP unit (proposal §3 Count/Gather/Reset,
// §4.1-4.3, §5.4 filters, §5.5.1; DESIGN §4.2/§4.4 counting rules; lwp_unit.h choices).
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "pmu/lwp/architecture.h"
#include "pmu/lwp/event_record.h"
#include "pmu/lwp/lwp_unit.h"
#include "tests/conformance/lwp_fixture.h"

namespace pmu::lwp::conformance {
namespace {

class EngineTest : public LwpFixture {
 protected:
  // Index i of RipOf(i) for every record the unit stored, in order.
  std::vector<int> Indices() const {
    std::vector<int> out;
    for (const auto& s : stored) {
      const Rec r = ParseRecord(Bytes(s.bytes));
      out.push_back(static_cast<int>((r.rip - kRip0) / 4));
    }
    return out;
  }
  // A fresh unit seeded with `seed`, instructions retired every 64 with Random = 4, over 2000
  // instructions: the record indices.
  std::vector<int> RandomisedRun(uint64_t seed) {
    config.seed = seed;
    mem = FakeGuestMemory();
    SetUp();
    MakeUnit();
    CbSpec cb = One(kEventInstructionsRetired, 64);
    cb.random = 4;
    Start(cb);
    RetirePlain(0, 2000);
    return Indices();
  }
  std::vector<uint8_t> Ids() const {
    std::vector<uint8_t> out;
    for (const auto& s : stored) out.push_back(static_cast<uint8_t>(s.bytes[0]));
    return out;
  }
  static CbSpec One(uint8_t id, uint32_t interval, uint32_t filters = 0) {
    CbSpec cb;
    cb.buffer_size = 0x4000;
    cb.filters = filters;
    cb.slots = {{id, interval, 0}};
    return cb;
  }
};

// §3 Count/Gather/Reset + §4.1: the counter counts down, a record is stored when it reaches zero,
// then it reloads with the interval. The counter as flushed by SLWPCB shows the count-down.
TEST_F(EngineTest, InstructionsRetiredCountDownAndReload) {
  Start(One(kEventInstructionsRetired, 3));
  RetirePlain(0, 2);
  EXPECT_TRUE(stored.empty());
  EXPECT_EQ(Slwpcb(), kLwpcbAddr);
  EXPECT_EQ(CbCounter(0), 1u);
  RetirePlain(2, 7);
  EXPECT_EQ(Indices(), (std::vector<int>{2, 5, 8}));
  EXPECT_EQ(unit->stats().records_stored, 3u);
  EXPECT_EQ(Slwpcb(), kLwpcbAddr);
  EXPECT_EQ(CbCounter(0), 3u);
  EXPECT_EQ(CbHead(), 96u);
}

// DESIGN §4.4: "the first counted instruction is the one after LLWPCB".
TEST_F(EngineTest, FirstCountedInstructionIsTheOneAfterLlwpcb) {
  Start(One(kEventInstructionsRetired, 1));
  unit->retire(Plain(RipOf(0)));
  EXPECT_EQ(Indices(), (std::vector<int>{0}));
  Reload(kLwpcbAddr, One(kEventInstructionsRetired, 2));
  stored.clear();
  RetirePlain(10, 2);
  EXPECT_EQ(Indices(), (std::vector<int>{11}));
}

// §3 / DESIGN §4.2: only CPL-3 execution counts.
TEST_F(EngineTest, OnlyCpl3Counts) {
  Start(One(kEventInstructionsRetired, 2));
  for (int i = 0; i < 12; ++i) unit->retire(Plain(RipOf(i), static_cast<uint8_t>(i % 4)));
  // CPL-3 instructions are i = 3, 7, 11: the second of them (7) records.
  EXPECT_EQ(Indices(), (std::vector<int>{7}));
  auto b = Branch(RipOf(20), BranchKind::kCall);
  b.cpl = 0;
  unit->retire(b);
  unit->retire(b);
  EXPECT_EQ(stored.size(), 1u);
}

// Figure 2 in the ring: exact image, CoreId = UnitConfig::core_id (DESIGN §4.2).
TEST_F(EngineTest, InstructionRecordImageInBuffer) {
  config.core_id = 0x2A;
  MakeUnit();
  Start(One(kEventInstructionsRetired, 1));
  unit->retire(Plain(0x00007FFFDEADBEE0ull));
  EXPECT_EQ(mem.peek(kBufferAddr, 32),
            Bytes(encode_instructions_retired(0x2A, 0x00007FFFDEADBEE0ull)));
  const Rec r = RecordAt(kBufferAddr, 0);
  EXPECT_EQ(r.id, 1);
  EXPECT_EQ(r.core, 0x2A);
  EXPECT_EQ(r.dword0, 0x00002A01u);
  EXPECT_EQ(r.data, 0u);
  EXPECT_EQ(r.rip, 0x00007FFFDEADBEE0ull);
  EXPECT_EQ(r.address, 0u);
  EXPECT_EQ(r.reserved, 0u);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].address, kBufferAddr);
  EXPECT_FALSE(stored[0].missed);
}

// §4.2: every control transfer counts (Jcc taken/not taken, JMP, JMP r/m, CALL, RET); others don't.
TEST_F(EngineTest, BranchKindsCounted) {
  config.core_id = 3;
  MakeUnit();
  Start(One(kEventBranchesRetired, 1));
  const RetiredInstruction seq[] = {
      Branch(RipOf(0), BranchKind::kConditional, true, 0x500000, true, true),
      Plain(RipOf(1)),
      Branch(RipOf(2), BranchKind::kConditional, false, RipOf(3), true, false),
      Branch(RipOf(3), BranchKind::kDirectJump, true, 0x500100, true, true),
      Branch(RipOf(4), BranchKind::kIndirectJump, true, 0x500200, false, false),
      Plain(RipOf(5)),
      Branch(RipOf(6), BranchKind::kCall, true, 0x500300, true, true),
      Branch(RipOf(7), BranchKind::kReturn, true, 0x500400, true, false),
  };
  for (const auto& insn : seq) unit->retire(insn);
  EXPECT_EQ(Indices(), (std::vector<int>{0, 2, 3, 4, 6, 7}));
  // Figure 3 images, in ring order.
  uint32_t off = 0;
  for (const auto& insn : seq) {
    if (!insn.is_branch()) continue;
    EXPECT_EQ(mem.peek(kBufferAddr + off, 32),
              Bytes(encode_branch_retired(3, insn.rip, insn.branch)))
        << "offset " << off;
    off += 32;
  }
  // Spot-check the bytes independently of the encoder (Figure 3 bits 31 taken, 30 predicted
  // correctly, 29 prediction valid).
  EXPECT_EQ(RecordAt(kBufferAddr, 0).dword0, 0xE0000302u);
  EXPECT_EQ(RecordAt(kBufferAddr, 0).address, 0x500000u);
  EXPECT_EQ(RecordAt(kBufferAddr, 32).dword0, 0x20000302u);  // not taken, mispredicted
  EXPECT_EQ(RecordAt(kBufferAddr, 32).address, RipOf(3));    // fall-through
  EXPECT_EQ(RecordAt(kBufferAddr, 96).dword0, 0x80000302u);  // taken, no prediction info
}

// §5.4 NDB: "direct branches will not be counted" - only unconditional RIP-relative jumps.
TEST_F(EngineTest, NdbDropsOnlyDirectJumps) {
  Start(One(kEventBranchesRetired, 1, lwpcb::kFilterNdb));
  unit->retire(Branch(RipOf(0), BranchKind::kDirectJump));
  unit->retire(Branch(RipOf(1), BranchKind::kConditional, false));
  unit->retire(Branch(RipOf(2), BranchKind::kDirectJump));
  unit->retire(Branch(RipOf(3), BranchKind::kIndirectJump));
  unit->retire(Branch(RipOf(4), BranchKind::kCall));
  unit->retire(Branch(RipOf(5), BranchKind::kReturn));
  unit->retire(Branch(RipOf(6), BranchKind::kConditional, true));
  EXPECT_EQ(Indices(), (std::vector<int>{1, 3, 4, 5, 6}));

  // Dropped jumps do not decrement the counter either.
  Reload(kLwpcbAddr, One(kEventBranchesRetired, 2, lwpcb::kFilterNdb));
  stored.clear();
  unit->retire(Branch(RipOf(10), BranchKind::kCall));
  for (int i = 11; i < 15; ++i) unit->retire(Branch(RipOf(i), BranchKind::kDirectJump));
  unit->retire(Branch(RipOf(15), BranchKind::kReturn));
  EXPECT_EQ(Indices(), (std::vector<int>{15}));
}

// §5.4 NDB only concerns Branches Retired: instructions retired still count direct jumps.
TEST_F(EngineTest, NdbDoesNotAffectInstructionsRetired) {
  Start(One(kEventInstructionsRetired, 1, lwpcb::kFilterNdb));
  unit->retire(Branch(RipOf(0), BranchKind::kDirectJump));
  unit->retire(Branch(RipOf(1), BranchKind::kDirectJump));
  EXPECT_EQ(Indices(), (std::vector<int>{0, 1}));
}

// §4.3 + Figure 4: DCache misses count per miss; the record carries latency/source/address.
TEST_F(EngineTest, DcacheMissRecordFromUnit) {
  config.core_id = 1;
  MakeUnit();
  Start(One(kEventDcacheMisses, 2));
  unit->retire(Load(RipOf(0), 0x7000, 100, DataSource::kDram));
  unit->retire(Plain(RipOf(1)));  // no miss: not counted
  unit->retire(Load(RipOf(2), 0x7FF8, 300, DataSource::kRemoteCache));
  ASSERT_EQ(Indices(), (std::vector<int>{2}));
  // dword0 = 3 | 1<<8 | 1<<28 | 2<<29 = 0x50000103; latency 288 = 0x120
  EXPECT_EQ(mem.peek(kBufferAddr, 32),
            (std::vector<std::byte>{
                std::byte{0x03}, std::byte{0x01}, std::byte{0x00}, std::byte{0x50}, std::byte{0x20},
                std::byte{0x01}, std::byte{0},    std::byte{0},    std::byte{0x08}, std::byte{0x10},
                std::byte{0x40}, std::byte{0},    std::byte{0},    std::byte{0},    std::byte{0},
                std::byte{0},    std::byte{0xF8}, std::byte{0x7F}, std::byte{0},    std::byte{0},
                std::byte{0},    std::byte{0},    std::byte{0},    std::byte{0},    std::byte{0},
                std::byte{0},    std::byte{0},    std::byte{0},    std::byte{0},    std::byte{0},
                std::byte{0},    std::byte{0}}));
}

// §4.3: each load directly caused by the instruction counts; the record is for the miss that
// brought the counter to zero (here the second load of the instruction).
TEST_F(EngineTest, DcacheTwoMissesInOneInstruction) {
  Start(One(kEventDcacheMisses, 2));
  RetiredInstruction insn = Load(RipOf(0), 0x1000, 64, DataSource::kDram);
  insn.cache_misses[1] = CacheMiss{0x2040, 128, DataSource::kLocalL3};
  insn.cache_miss_count = 2;
  unit->retire(insn);
  ASSERT_EQ(stored.size(), 1u);
  const Rec r = RecordAt(kBufferAddr, 0);
  EXPECT_EQ(r.address, 0x2040u);
  EXPECT_EQ(r.data, 128u);
  EXPECT_EQ(r.dword0 >> 29, 1u);
}

// §5.4 MinLatency: units of 16 cycles; latency compared after rounding down (lwp_unit.h);
// "minimum latency required" -> a miss of exactly MinLatency*16 is eligible.
TEST_F(EngineTest, MinLatencyFilter) {
  caps.cache_level_filter = false;
  MakeUnit();
  Start(One(kEventDcacheMisses, 1, /*MinLatency=*/4));
  const uint32_t lat[] = {63, 64, 79, 10, 200, 48, 1000};
  for (int i = 0; i < 7; ++i) unit->retire(Load(RipOf(i), 0x9000 + i, lat[i], DataSource::kDram));
  EXPECT_EQ(Indices(), (std::vector<int>{1, 2, 4, 6}));
  EXPECT_EQ(RecordAt(kBufferAddr, 32).data, 64u);  // 79 reported as 64
}

// §5.4 MinLatency: "If MinLatency*16 exceeds this maximum value, the maximum is used instead."
TEST_F(EngineTest, MinLatencyCappedAtMaximumLatency) {
  Start(One(kEventDcacheMisses, 1, /*MinLatency=*/255));          // 4080 > 1008 (n = 10)
  unit->retire(Load(RipOf(0), 0x9000, 1000, DataSource::kDram));  // 992: below the cap
  unit->retire(Load(RipOf(1), 0x9000, 5000, DataSource::kDram));  // 1008: eligible
  unit->retire(Load(RipOf(2), 0x9000, 1008, DataSource::kLocalL3));
  EXPECT_EQ(Indices(), (std::vector<int>{1, 2}));
  EXPECT_EQ(RecordAt(kBufferAddr, 0).data, 1008u);
}

// §5.4 MinLatency "ignored if CPUID indicates that the implementation does not filter by latency".
TEST_F(EngineTest, MinLatencyIgnoredWithoutLatencyCapability) {
  caps.cache_latency_filter = false;
  MakeUnit();
  Start(One(kEventDcacheMisses, 1, /*MinLatency=*/100));
  unit->retire(Load(RipOf(0), 0x9000, 20, DataSource::kDram));
  unit->retire(Load(RipOf(1), 0x9000, 0, DataSource::kL2));
  EXPECT_EQ(Indices(), (std::vector<int>{0, 1}));
}

// §5.4 CLF + NBC/RDC/RAM/OTH select Figure 4 sources 1/2/3/7; lwp_unit.h: L2 and "no valid
// status" are never eligible under CLF.
TEST_F(EngineTest, CacheLevelFilterSelectsSources) {
  caps.cache_latency_filter = false;
  MakeUnit();
  SetMsr0(kMsr0AllFeatures | msr0_vector(kVector));
  const DataSource all[] = {DataSource::kNoValidStatus, DataSource::kLocalL3,
                            DataSource::kRemoteCache,   DataSource::kDram,
                            DataSource::kOther,         DataSource::kL2};
  struct Case {
    uint32_t bits;
    std::vector<int> expect;  // indices into `all`
  };
  const Case cases[] = {
      {lwpcb::kFilterNbc, {1}},
      {lwpcb::kFilterRdc, {2}},
      {lwpcb::kFilterRam, {3}},
      {lwpcb::kFilterOth, {4}},
      {lwpcb::kFilterNbc | lwpcb::kFilterRam, {1, 3}},
      {lwpcb::kFilterNbc | lwpcb::kFilterRdc | lwpcb::kFilterRam | lwpcb::kFilterOth, {1, 2, 3, 4}},
      {0, {}},
  };
  for (const Case& c : cases) {
    PokeLwpcb(mem, kLwpcbAddr, One(kEventDcacheMisses, 1, lwpcb::kFilterClf | c.bits));
    ASSERT_EQ(Llwpcb(kLwpcbAddr), MsrResult::kOk);
    stored.clear();
    for (int i = 0; i < 6; ++i) unit->retire(Load(RipOf(i), 0x9000, 500, all[i]));
    EXPECT_EQ(Indices(), c.expect) << std::hex << c.bits;
    ASSERT_EQ(Llwpcb(0), MsrResult::kOk);
  }
}

// §5.4 CLF = 0: "any cache or memory level is eligible" (L2 too, reported with source code 0).
TEST_F(EngineTest, CacheLevelFilterOffAllSourcesEligible) {
  Start(One(kEventDcacheMisses, 1, lwpcb::kFilterNbc));  // NBC without CLF is ignored
  unit->retire(Load(RipOf(0), 0x9000, 40, DataSource::kL2));
  unit->retire(Load(RipOf(1), 0x9000, 40, DataSource::kNoValidStatus));
  unit->retire(Load(RipOf(2), 0x9000, 40, DataSource::kOther));
  EXPECT_EQ(Indices(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(RecordAt(kBufferAddr, 0).dword0, 0x10000003u);
  EXPECT_EQ(RecordAt(kBufferAddr, 64).dword0, 0xF0000003u);
}

// §5.4 CLF "is ignored if CPUID indicates that the implementation does not filter by cache level".
TEST_F(EngineTest, CacheLevelFilterIgnoredWithoutCapability) {
  caps.cache_level_filter = false;
  MakeUnit();
  Start(One(kEventDcacheMisses, 1, lwpcb::kFilterClf | lwpcb::kFilterNbc));
  unit->retire(Load(RipOf(0), 0x9000, 40, DataSource::kDram));
  unit->retire(Load(RipOf(1), 0x9000, 40, DataSource::kL2));
  EXPECT_EQ(Indices(), (std::vector<int>{0, 1}));
}

// lwp_unit.h: both filters supported and in use -> a miss must pass both.
TEST_F(EngineTest, LatencyAndLevelFiltersBothApply) {
  Start(One(kEventDcacheMisses, 1, lwpcb::kFilterClf | lwpcb::kFilterRam | 4));
  unit->retire(Load(RipOf(0), 0x9000, 100, DataSource::kDram));     // both pass
  unit->retire(Load(RipOf(1), 0x9000, 30, DataSource::kDram));      // latency fails
  unit->retire(Load(RipOf(2), 0x9000, 100, DataSource::kLocalL3));  // level fails
  unit->retire(Load(RipOf(3), 0x9000, 64, DataSource::kDram));      // both pass
  EXPECT_EQ(Indices(), (std::vector<int>{0, 3}));
}

// Table 2 ECX 5 = 0: records of the unit carry no data address.
TEST_F(EngineTest, DcacheRecordWithoutDataAddressCapability) {
  caps.data_address = false;
  MakeUnit();
  Start(One(kEventDcacheMisses, 1));
  unit->retire(Load(RipOf(0), 0x12345678, 40, DataSource::kDram));
  const Rec r = RecordAt(kBufferAddr, 0);
  EXPECT_EQ(r.dword0, 0x60000003u);
  EXPECT_EQ(r.address, 0u);
  EXPECT_EQ(r.data, 32u);
}

// §5.5.1 one record per instruction + lwp_unit.h: the slot already waiting at zero goes first,
// else the lowest slot; the others stay frozen until the next instruction causing their event.
TEST_F(EngineTest, OneRecordPerInstructionWaitingFirst) {
  CbSpec cb;
  cb.buffer_size = 0x4000;
  cb.slots = {{kEventInstructionsRetired, 1, 0}, {kEventBranchesRetired, 1, 0}};
  Start(cb);
  unit->retire(Branch(RipOf(0), BranchKind::kCall));    // IR and BR expire: IR (lowest slot)
  unit->retire(Plain(RipOf(1)));                        // BR waits, no branch: IR
  unit->retire(Branch(RipOf(2), BranchKind::kReturn));  // BR was waiting: BR; IR frozen
  unit->retire(Plain(RipOf(3)));                        // IR was waiting: IR
  unit->retire(Branch(RipOf(4), BranchKind::kCall));    // both expire, none waiting: IR
  unit->retire(Branch(RipOf(5), BranchKind::kCall));    // BR waiting: BR
  EXPECT_EQ(Indices(), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(Ids(), (std::vector<uint8_t>{1, 1, 2, 1, 1, 2}));
}

// lwp_unit.h: with no slot waiting, the lowest slot wins whatever its EventId.
TEST_F(EngineTest, SimultaneousExpiryLowestSlotWins) {
  CbSpec cb;
  cb.slots = {{kEventBranchesRetired, 1, 0}, {kEventInstructionsRetired, 1, 0}};
  Start(cb);
  unit->retire(Branch(RipOf(0), BranchKind::kIndirectJump));
  unit->retire(Plain(RipOf(1)));
  EXPECT_EQ(Ids(), (std::vector<uint8_t>{2, 1}));
  EXPECT_EQ(Indices(), (std::vector<int>{0, 1}));
}

// DESIGN §4.2 Random: low Random bits of each reload come from the seeded PRNG; same seed gives
// the same stream; counters stay within interval with the low bits replaced.
TEST_F(EngineTest, RandomSameSeedSameStream) {
  const auto a = RandomisedRun(12345);
  const auto b = RandomisedRun(12345);
  ASSERT_GE(a.size(), 20u);
  EXPECT_EQ(a, b);
  // Gaps: (64 & ~15) | r, r in 0..15 -> 64..79.
  int prev = -1;
  std::set<int> gaps;
  for (int idx : a) {
    const int gap = idx - prev;
    EXPECT_GE(gap, 64);
    EXPECT_LE(gap, 79);
    gaps.insert(gap);
    prev = idx;
  }
  EXPECT_GE(gaps.size(), 4u) << "low bits are not randomised";
}

// DESIGN §4.2: the seed is the PRNG's: different seeds give different streams.
TEST_F(EngineTest, RandomDifferentSeedDiffers) {
  EXPECT_NE(RandomisedRun(1), RandomisedRun(2));
  EXPECT_NE(RandomisedRun(0), RandomisedRun(0xFFFFFFFFFFFFFFFFull));
}

// Table 4 Random = 0: no randomisation, exact intervals regardless of the seed.
TEST_F(EngineTest, RandomZeroIsExact) {
  config.seed = 987654321;
  MakeUnit();
  Start(One(kEventInstructionsRetired, 5));
  RetirePlain(0, 20);
  EXPECT_EQ(Indices(), (std::vector<int>{4, 9, 14, 19}));
}

// lwp_unit.h: a randomised reload that comes out 0 becomes 1 (interval 8, Random 4 -> 1..15).
TEST_F(EngineTest, RandomReloadNeverZero) {
  config.seed = 7;
  MakeUnit();
  CbSpec cb = One(kEventInstructionsRetired, 8);
  cb.random = 4;
  Start(cb);
  for (int i = 0; i < 3000; ++i) {
    unit->retire(Plain(RipOf(i)));
    const uint32_t c = unit->save().counters[0];
    EXPECT_GE(c, 1u) << "after instruction " << i;
    EXPECT_LE(c, 15u) << "after instruction " << i;
  }
  int prev = -1;
  ASSERT_GE(stored.size(), 300u);
  for (int idx : Indices()) {
    EXPECT_GE(idx - prev, 1);
    EXPECT_LE(idx - prev, 15);
    prev = idx;
  }
}

// §3 + lwp_unit.h: a store to a buffer page outside guest RAM (no #PF could fix it) discards the
// record; the counter stays at zero and the next instruction causing the event is recorded; then
// the interval restarts. (Not-present and read-only pages trap: page_fault_trap_test.cc.)
TEST_F(EngineTest, StoreFaultRecordsNextInstruction) {
  Start(One(kEventInstructionsRetired, 5));
  RetirePlain(0, 4);
  mem.set_outside_ram(kBufferAddr, 0x4000);
  RetirePlain(4, 1);
  EXPECT_TRUE(stored.empty());
  EXPECT_EQ(unit->stats().store_faults, 1u);
  EXPECT_EQ(unit->stats().page_faults, 0u);
  EXPECT_TRUE(page_faults.faults.empty());
  EXPECT_EQ(unit->stats().records_stored, 0u);
  mem.set_outside_ram(kBufferAddr, 0x4000, false);
  RetirePlain(5, 6);
  EXPECT_EQ(Indices(), (std::vector<int>{5, 10}));
  EXPECT_EQ(RecordAt(kBufferAddr, 0).rip, RipOf(5));
  EXPECT_EQ(RecordAt(kBufferAddr, 32).rip, RipOf(10));
}

// lwp_unit.h generation(): bumped when counting changes the volatile state.
TEST_F(EngineTest, GenerationBumpsWhenCounting) {
  Start(One(kEventInstructionsRetired, 100));
  const uint64_t g0 = unit->generation();
  RetirePlain(0, 1);
  EXPECT_NE(unit->generation(), g0);
}

// quiet_retirements (lwp_unit.h): a block stepper retires that many instructions at once, so no
// record may fall before the last of them, and for instructions retired it is exactly the one
// that takes the counter to zero (otherwise blocks would end early for nothing).
TEST_F(EngineTest, QuietRetirementsEndExactlyAtTheNextInstructionsRecord) {
  EXPECT_EQ(LwpUnit(caps, config, mem, sink, &page_faults).quiet_retirements(), UINT64_MAX)
      << "no LWPCB: nothing to show";
  Start(One(kEventInstructionsRetired, 7));
  EXPECT_EQ(unit->quiet_retirements(), 7u);
  int next = 0;
  for (int round = 0; round < 4; ++round) {
    const uint64_t quiet = unit->quiet_retirements();
    ASSERT_GE(quiet, 1u);
    const size_t before = stored.size();
    RetirePlain(next, static_cast<int>(quiet) - 1);
    next += static_cast<int>(quiet) - 1;
    EXPECT_EQ(stored.size(), before) << "a record before the run's last instruction";
    RetirePlain(next++, 1);
    EXPECT_EQ(stored.size(), before + 1) << "the run ends at the record";
  }
}

TEST_F(EngineTest, QuietRetirementsCountABranchPerInstructionAndTwoMisses) {
  CbSpec cb = One(kEventBranchesRetired, 2);
  Start(cb);
  RetirePlain(0, 1);
  EXPECT_EQ(unit->quiet_retirements(), 2u) << "every instruction of a run may be a branch";
  Reload(kLwpcbAddr, One(kEventDcacheMisses, 2));
  RetirePlain(1, 1);
  EXPECT_EQ(unit->quiet_retirements(), 1u) << "the run's first instruction may miss twice";
  Reload(kLwpcbAddr, One(kEventDcacheMisses, 51));
  RetirePlain(2, 1);
  ASSERT_EQ(unit->quiet_retirements(), 26u);
  // 25 instructions missing twice each: 50 misses, no record; the 26th stores it.
  const RetiredInstruction two_misses = [] {
    RetiredInstruction insn = Load(RipOf(3), 0x30000, 400, DataSource::kDram);
    insn.cache_misses[1] = insn.cache_misses[0];
    insn.cache_misses[1].data_address += 64;
    insn.cache_miss_count = 2;
    return insn;
  }();
  for (int i = 0; i < 25; ++i) unit->retire(two_misses);
  EXPECT_TRUE(stored.empty());
  unit->retire(two_misses);
  EXPECT_EQ(stored.size(), 1u);
}

// Issue 21: a backend may leave its cache model alone while no DCache slot is active. Until an
// LWPCB's first retirement initialises it, its events are unknown: the model is in use.
TEST_F(EngineTest, CountsCacheMissesOnlyWithAnActiveDcacheSlotOrBeforeInitialisation) {
  EXPECT_FALSE(LwpUnit(caps, config, mem, sink, &page_faults).counts_cache_misses()) << "no LWPCB";
  CbSpec two = One(kEventInstructionsRetired, 5);
  two.slots.push_back({kEventBranchesRetired, 5, 0});
  Start(two);
  EXPECT_FALSE(unit->counts_cache_misses()) << "instructions and branches only";
  // LLWPCB outside ring 3 loads the pointer only; the events are read at the next ring-3 entry.
  ASSERT_EQ(Llwpcb(0, 0), MsrResult::kOk);
  ASSERT_EQ(Llwpcb(kLwpcbAddr, 0), MsrResult::kOk);
  EXPECT_TRUE(unit->counts_cache_misses()) << "awaiting initialisation";
  RetirePlain(0, 1);
  EXPECT_FALSE(unit->counts_cache_misses());
  Reload(kLwpcbAddr, One(kEventDcacheMisses, 3));
  RetirePlain(1, 1);
  EXPECT_TRUE(unit->counts_cache_misses());
  Reload(kLwpcbAddr, two);
  RetirePlain(2, 1);
  EXPECT_FALSE(unit->counts_cache_misses());
}

}  // namespace
}  // namespace pmu::lwp::conformance
