// Conformance: the #PF trap of ring-buffer stores (proposal §5.5.6, second option; DESIGN §4.1;
// the choices in pmu/lwp/lwp_unit.h). A store that finds its buffer page not present or not
// user-writable raises #PF with CR2 = the record's address and error code U|W (+P when the page is
// present); the instruction has retired, nothing is written, the unit's state does not change, and
// the next occurrence of the event stores the record.
#include <gtest/gtest.h>

#include "pmu/lwp/architecture.h"
#include "pmu/lwp/lwp_unit.h"
#include "pmu/page_fault_sink.h"
#include "tests/conformance/lwp_fixture.h"

namespace pmu::lwp::conformance {
namespace {

using Fault = RecordingPageFaultSink::Fault;
constexpr uint32_t kNotPresent = page_fault::kUser | page_fault::kWrite;  // 0x6
constexpr uint32_t kReadOnly =
    page_fault::kUser | page_fault::kWrite | page_fault::kPresent;  // 0x7

class PageFaultTrapTest : public LwpFixture {
 protected:
  static CbSpec One(uint8_t id, uint32_t interval) {
    CbSpec cb;
    cb.slots = {{id, interval, 0}};
    return cb;
  }

  // Retires `insn`, expecting exactly one #PF trap `want` and no other effect: no guest memory
  // written, no record, no interrupt, and the unit's state as before except `frozen_slot`, whose
  // counter this occurrence took (or kept) at zero.
  void RetireExpectingTrap(const RetiredInstruction& insn, Fault want, int frozen_slot = 0) {
    UnitState expected = unit->state();
    expected.save_area.counters[frozen_slot] = 0;
    const UnitStats stats_before = unit->stats();
    const size_t faults_before = page_faults.faults.size();
    const size_t stored_before = stored.size();
    const size_t vectors_before = sink.vectors.size();
    mem.clear_log();
    unit->retire(insn);
    ASSERT_EQ(page_faults.faults.size(), faults_before + 1);
    EXPECT_EQ(page_faults.faults.back(), want)
        << std::hex << "cr2 0x" << page_faults.faults.back().linear << " error 0x"
        << page_faults.faults.back().error_code;
    EXPECT_TRUE(mem.writes().empty()) << "a trapped store wrote guest memory";
    EXPECT_EQ(stored.size(), stored_before);
    EXPECT_EQ(sink.vectors.size(), vectors_before);
    EXPECT_EQ(unit->state(), expected);
    EXPECT_EQ(unit->stats().page_faults, stats_before.page_faults + 1);
    EXPECT_EQ(unit->stats().records_stored, stats_before.records_stored);
    EXPECT_EQ(unit->stats().records_missed, stats_before.records_missed);
    EXPECT_EQ(unit->stats().store_faults, stats_before.store_faults);
  }
};

// Instructions retired, buffer page not present at LLWPCB: the 5th instruction traps (P = 0), the
// 6th stores its own record at the same address, and the interval restarts from there (11th).
TEST_F(PageFaultTrapTest, NotPresentPageTrapsAndNextOccurrenceStores) {
  mem.unmap(kBufferAddr, 4096);
  Start(One(kEventInstructionsRetired, 5));
  RetirePlain(0, 4);
  EXPECT_TRUE(page_faults.faults.empty());
  RetireExpectingTrap(Plain(RipOf(4)), {kBufferAddr, kNotPresent});
  EXPECT_EQ(CbHead(), 0u);
  EXPECT_EQ(CbU64(24), 0u);    // MissedEvents
  mem.map(kBufferAddr, 4096);  // what the guest's #PF handler does
  RetirePlain(5, 6);
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(stored[0].address, kBufferAddr);
  EXPECT_EQ(RecordAt(kBufferAddr, 0).rip, RipOf(5));
  EXPECT_EQ(RecordAt(kBufferAddr, 0).id, kEventInstructionsRetired);
  EXPECT_EQ(RecordAt(kBufferAddr, 32).rip, RipOf(10));
  EXPECT_EQ(page_faults.faults.size(), 1u);
  EXPECT_EQ(unit->stats().page_faults, 1u);
  EXPECT_EQ(unit->stats().records_stored, 2u);
}

// While the page stays absent, every further occurrence traps again (the counter stays frozen at
// zero; the trap changes nothing), each with the same CR2 and error code.
TEST_F(PageFaultTrapTest, EveryOccurrenceTrapsUntilThePageIsThere) {
  mem.unmap(kBufferAddr, 4096);
  Start(One(kEventInstructionsRetired, 2));
  RetirePlain(0, 1);
  for (int i = 1; i < 4; ++i) RetireExpectingTrap(Plain(RipOf(i)), {kBufferAddr, kNotPresent});
  mem.map(kBufferAddr, 4096);
  RetirePlain(4, 1);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(RecordAt(kBufferAddr, 0).rip, RipOf(4));
}

// A present, read-only page (copy-on-write) traps with P = 1.
TEST_F(PageFaultTrapTest, ReadOnlyPageTrapsWithPresentBit) {
  mem.set_writable(kBufferAddr, 4096, false);
  Start(One(kEventInstructionsRetired, 3));
  RetirePlain(0, 2);
  RetireExpectingTrap(Plain(RipOf(2)), {kBufferAddr, kReadOnly});
  mem.set_writable(kBufferAddr, 4096, true);
  RetirePlain(3, 1);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(RecordAt(kBufferAddr, 0).rip, RipOf(3));
}

// CR2 is the record's address, not BufferBase: a buffer over two pages whose second page is absent
// stores 4 records in the first page (head 0..96) and traps at the second page's first byte.
TEST_F(PageFaultTrapTest, Cr2IsTheRecordAddress) {
  const uint64_t base = kBufferAddr + 0x1000 - 4 * 32;
  mem.unmap(kBufferAddr + 0x1000, 4096);
  CbSpec cb = One(kEventInstructionsRetired, 1);
  cb.buffer_base = base;
  Start(cb);
  RetirePlain(0, 4);
  ASSERT_EQ(stored.size(), 4u);
  RetireExpectingTrap(Plain(RipOf(4)), {kBufferAddr + 0x1000, kNotPresent});
  EXPECT_EQ(unit->save().head_offset, 128u);
  mem.map(kBufferAddr + 0x1000, 4096);
  RetirePlain(5, 1);
  ASSERT_EQ(stored.size(), 5u);
  EXPECT_EQ(stored[4].address, kBufferAddr + 0x1000);
  EXPECT_EQ(RecordAt(base, 128).rip, RipOf(5));
}

// Branches retired: the branch whose record traps is lost; the next branch is recorded with its
// own RIP and target (non-branches in between do not count).
TEST_F(PageFaultTrapTest, BranchRecordTrapsAndNextBranchStores) {
  mem.unmap(kBufferAddr, 4096);
  Start(One(kEventBranchesRetired, 2));
  unit->retire(Branch(RipOf(0), BranchKind::kConditional, true, 0x500000));
  unit->retire(Plain(RipOf(1)));
  RetireExpectingTrap(Branch(RipOf(2), BranchKind::kCall, true, 0x600000),
                      {kBufferAddr, kNotPresent});
  mem.map(kBufferAddr, 4096);
  unit->retire(Plain(RipOf(3)));
  EXPECT_TRUE(stored.empty());
  unit->retire(Branch(RipOf(4), BranchKind::kReturn, true, 0x700000));
  ASSERT_EQ(stored.size(), 1u);
  const Rec r = RecordAt(kBufferAddr, 0);
  EXPECT_EQ(r.id, kEventBranchesRetired);
  EXPECT_EQ(r.rip, RipOf(4));
  EXPECT_EQ(r.address, 0x700000u);
}

// DCache misses: the miss whose record traps is lost; the next eligible miss is recorded with its
// own data address and latency.
TEST_F(PageFaultTrapTest, DcacheRecordTrapsAndNextMissStores) {
  mem.set_writable(kBufferAddr, 4096, false);
  Start(One(kEventDcacheMisses, 1));
  RetireExpectingTrap(Load(RipOf(0), 0x8000, 200, DataSource::kDram), {kBufferAddr, kReadOnly});
  unit->retire(Plain(RipOf(1)));
  EXPECT_EQ(page_faults.faults.size(), 1u);  // no miss, no occurrence, no store
  mem.set_writable(kBufferAddr, 4096, true);
  unit->retire(Load(RipOf(2), 0x9040, 288, DataSource::kDram));
  ASSERT_EQ(stored.size(), 1u);
  const Rec r = RecordAt(kBufferAddr, 0);
  EXPECT_EQ(r.id, kEventDcacheMisses);
  EXPECT_EQ(r.rip, RipOf(2));
  EXPECT_EQ(r.address, 0x9040u);
  EXPECT_EQ(r.data, 288u);  // a multiple of 16: reported as is
}

// Full buffer (Table 4): the record overwrites the last one and MissedEvents is incremented. A
// trap of that overwrite leaves MissedEvents, head and the old record untouched; the next
// occurrence does both.
TEST_F(PageFaultTrapTest, FullBufferOverwriteTrapsBeforeMissedEvents) {
  CbSpec cb = One(kEventInstructionsRetired, 1);
  cb.head = 64;
  cb.tail = 96;  // head + 32 == tail: full
  cb.missed = 5;
  mem.poke_u64(kBufferAddr + 64 + 8, 0x1234);  // the old last record's RIP
  Start(cb);
  mem.set_writable(kBufferAddr, 4096, false);
  RetireExpectingTrap(Plain(RipOf(0)), {kBufferAddr + 64, kReadOnly});
  EXPECT_EQ(CbU64(24), 5u);
  EXPECT_EQ(mem.peek_u64(kBufferAddr + 64 + 8), 0x1234u);
  mem.set_writable(kBufferAddr, 4096, true);
  RetirePlain(1, 1);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_TRUE(stored[0].missed);
  EXPECT_EQ(stored[0].address, kBufferAddr + 64);
  EXPECT_EQ(RecordAt(kBufferAddr, 64).rip, RipOf(1));
  EXPECT_EQ(CbU64(24), 6u);
  EXPECT_EQ(CbHead(), 64u);
  EXPECT_EQ(unit->stats().records_missed, 1u);
}

// With two slots, the slot that was already waiting at zero is chosen first (lwp_unit.h): after a
// trap of the instructions slot, a branch that also expires its slot is recorded as the waiting
// instruction event; the branch slot waits for the next branch.
TEST_F(PageFaultTrapTest, FrozenSlotWinsAfterTrap) {
  mem.unmap(kBufferAddr, 4096);
  CbSpec cb;
  cb.slots = {{kEventInstructionsRetired, 2, 0}, {kEventBranchesRetired, 1, 0}};
  Start(cb);
  unit->retire(Plain(RipOf(0)));
  RetireExpectingTrap(Plain(RipOf(1)), {kBufferAddr, kNotPresent});
  mem.map(kBufferAddr, 4096);
  unit->retire(Branch(RipOf(2), BranchKind::kDirectJump, true, 0x500000));
  unit->retire(Branch(RipOf(3), BranchKind::kDirectJump, true, 0x510000));
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(RecordAt(kBufferAddr, 0).id, kEventInstructionsRetired);
  EXPECT_EQ(RecordAt(kBufferAddr, 0).rip, RipOf(2));
  EXPECT_EQ(RecordAt(kBufferAddr, 32).id, kEventBranchesRetired);
  EXPECT_EQ(RecordAt(kBufferAddr, 32).rip, RipOf(3));
  EXPECT_EQ(page_faults.faults.size(), 1u);
}

// A trap never raises the threshold interrupt; the store that follows does (threshold 32).
TEST_F(PageFaultTrapTest, NoThresholdInterruptOnTrap) {
  mem.unmap(kBufferAddr, 4096);
  CbSpec cb = One(kEventInstructionsRetired, 1);
  cb.threshold = 32;
  Start(cb);
  RetireExpectingTrap(Plain(RipOf(0)), {kBufferAddr, kNotPresent});
  EXPECT_TRUE(sink.vectors.empty());
  mem.map(kBufferAddr, 4096);
  RetirePlain(1, 1);
  EXPECT_EQ(sink.vectors, (std::vector<uint8_t>{kVector}));
}

// A page the guest cannot make writable (outside RAM) raises no #PF: the record is discarded and
// counted as a store fault, with the same frozen-counter rule.
TEST_F(PageFaultTrapTest, UnreachablePageRaisesNoPageFault) {
  mem.set_outside_ram(kBufferAddr, 4096);
  Start(One(kEventInstructionsRetired, 1));
  RetirePlain(0, 2);
  EXPECT_TRUE(page_faults.faults.empty());
  EXPECT_EQ(unit->stats().store_faults, 2u);
  EXPECT_EQ(unit->stats().page_faults, 0u);
  EXPECT_TRUE(stored.empty());
}

// The trap needs no sink to keep its semantics: without one the unit changes nothing either.
TEST_F(PageFaultTrapTest, WithoutSinkStateStillUnchanged) {
  unit = std::make_unique<LwpUnit>(caps, config, mem, sink);
  unit->set_record_observer([this](const StoredRecord& r) { stored.push_back(r); });
  mem.unmap(kBufferAddr, 4096);
  Start(One(kEventInstructionsRetired, 1));
  RetirePlain(0, 1);
  EXPECT_EQ(unit->stats().page_faults, 1u);
  EXPECT_EQ(unit->save().counters[0], 0u);
  EXPECT_EQ(unit->save().head_offset, 0u);
  mem.map(kBufferAddr, 4096);
  RetirePlain(1, 1);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(RecordAt(kBufferAddr, 0).rip, RipOf(1));
}

// A trapped store survives a save/restore (world switch, snapshot): the restored unit still owes
// the record and stores it at the next occurrence, at the unchanged head.
TEST_F(PageFaultTrapTest, SaveRestoreKeepsTheOwedRecord) {
  mem.unmap(kBufferAddr, 4096);
  CbSpec cb = One(kEventInstructionsRetired, 3);
  Start(cb);
  RetirePlain(0, 2);
  RetireExpectingTrap(Plain(RipOf(2)), {kBufferAddr, kNotPresent});
  const SaveArea saved = unit->save();
  MakeUnit();
  SetMsr0(kMsr0AllFeatures | msr0_vector(kVector));
  unit->restore(saved);
  mem.map(kBufferAddr, 4096);
  unit->enter_user();
  RetirePlain(3, 1);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(RecordAt(kBufferAddr, 0).rip, RipOf(3));
}

}  // namespace
}  // namespace pmu::lwp::conformance
