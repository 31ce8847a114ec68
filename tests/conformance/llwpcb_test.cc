// Conformance: LLWPCB / SLWPCB (proposal §5.3, §5.2.2) through WRMSR/RDMSR LWPMSR1, with the
// validation rules of DESIGN §4.1 and the choices listed at the top of pmu/lwp/lwp_unit.h.
#include <gtest/gtest.h>

#include "pmu/lwp/architecture.h"
#include "pmu/lwp/lwp_unit.h"
#include "tests/conformance/lwp_fixture.h"

namespace pmu::lwp::conformance {
namespace {

class LlwpcbTest : public LwpFixture {
 protected:
  void SetUp() override {
    LwpFixture::SetUp();
    MakeUnit();
    SetMsr0(kMsr0AllFeatures | msr0_vector(kVector));
  }

  static CbSpec Valid() {
    CbSpec cb;
    cb.slots = {{kEventInstructionsRetired, 4, 0}};
    return cb;
  }

  // Expects #GP for LLWPCB(address) at `cpl`, with no memory written and no state changed.
  void ExpectGp(uint64_t address, uint8_t cpl = 3) {
    const UnitState before = unit->state();
    const uint64_t before_cb = unit->lwpcb_address();
    const auto before_stats = unit->stats();
    mem.clear_log();
    EXPECT_EQ(Llwpcb(address, cpl), MsrResult::kGeneralProtection)
        << std::hex << "address 0x" << address << " cpl " << int(cpl);
    EXPECT_TRUE(mem.writes().empty()) << "a faulting LLWPCB wrote guest memory";
    EXPECT_EQ(unit->state(), before);
    EXPECT_EQ(unit->lwpcb_address(), before_cb);
    EXPECT_EQ(unit->stats(), before_stats);
  }
};

// DESIGN §4.1 / lwp_unit.h: LLWPCB with LWPMSR0.EN clear is #GP (§5.3 says #UD; the VMM's MSR path
// can only raise #GP).
TEST_F(LlwpcbTest, GpWhenLwpmsr0EnabledClear) {
  PokeLwpcb(mem, kLwpcbAddr, Valid());
  SetMsr0(msr0::kIre | msr0::kBre);
  ExpectGp(kLwpcbAddr, 3);
  ExpectGp(kLwpcbAddr, 0);
  SetMsr0(0);
  ExpectGp(kLwpcbAddr, 3);
  EXPECT_EQ(Slwpcb(), 0u);
}

// §5.3: "The LWPCB must be aligned on a 16-byte boundary"; DESIGN §4.1: misaligned is #GP.
TEST_F(LlwpcbTest, GpWhenMisaligned) {
  for (uint64_t off : {1, 2, 4, 8, 12, 15}) {
    PokeLwpcb(mem, kLwpcbAddr + 0x100 + off, Valid());
    ExpectGp(kLwpcbAddr + 0x100 + off, 3);
  }
  ExpectGp(kLwpcbAddr + 8, 0);  // at any CPL
  PokeLwpcb(mem, kLwpcbAddr + 0x110, Valid());
  EXPECT_EQ(Llwpcb(kLwpcbAddr + 0x110), MsrResult::kOk);  // 16-aligned is fine
}

// §5.3: the LWPCB "must be writable in user mode"; DESIGN §4.1: unmapped or read-only is #GP.
TEST_F(LlwpcbTest, GpWhenLwpcbNotUserWritable) {
  ExpectGp(0x50000, 3);  // unmapped
  ExpectGp(0x50000, 0);
  PokeLwpcb(mem, kLwpcbAddr, Valid());
  mem.set_writable(kLwpcbAddr, 4096, false);
  ExpectGp(kLwpcbAddr, 3);
  ExpectGp(kLwpcbAddr, 0);
}

// §5.3 [DS:rAX, DS:rAX + sizeof(LWPCB) - 1]: size = 40 + 8*MaxEvents = 64 here; its last bytes
// on an unmapped page make the LLWPCB #GP.
TEST_F(LlwpcbTest, GpWhenLwpcbCrossesIntoUnmappedPage) {
  mem.map(0x30000, 4096);
  const uint64_t at = 0x31000 - 48;  // 48 bytes mapped, 64 needed
  PokeLwpcb(mem, at, Valid());
  ExpectGp(at, 3);
  ExpectGp(at, 0);
}

// Table 2 LWPCBSize: with MaxEvents = 1 the LWPCB is 48 bytes; bytes after it are not part of it.
TEST_F(LlwpcbTest, LwpcbIs40Plus8MaxEventsBytes) {
  caps.max_events = 1;
  MakeUnit();
  SetMsr0(kMsr0AllFeatures | msr0_vector(kVector));
  mem.map(0x30000, 4096);
  const uint64_t at = 0x31000 - 48;
  CbSpec cb = Valid();
  cb.slots = {{kEventInstructionsRetired, 2, 0}};
  PokeLwpcb(mem, at, cb);
  ASSERT_EQ(Llwpcb(at), MsrResult::kOk);
  EXPECT_EQ(mem.peek_u32(at), lwpcb::kFlagEnabled | lwpcb::flag_for_event(1));
  EXPECT_EQ(Slwpcb(), at);
  RetirePlain(0, 4);
  EXPECT_EQ(stored.size(), 2u);
}

// §5.4 Table 4 BufferSize "must be a multiple of LWPEventSize"; DESIGN §4.1: 0 or not a multiple
// of 32 is #GP.
TEST_F(LlwpcbTest, GpWhenBufferSizeZeroOrNotMultipleOf32) {
  for (uint32_t size : {0u, 16u, 33u, 48u, 100u, 0x0FFFFFFFu}) {
    CbSpec cb = Valid();
    cb.buffer_size = size;
    PokeLwpcb(mem, kLwpcbAddr, cb);
    ExpectGp(kLwpcbAddr, 3);
    ExpectGp(kLwpcbAddr, 0);
  }
}

// DESIGN §4.1: the ring buffer's pages need not be present or writable at LLWPCB (stores raise a
// #PF trap instead: page_fault_trap_test.cc); only its range must be canonical.
TEST_F(LlwpcbTest, BufferPagesNeedNotBeWritableAtLlwpcb) {
  CbSpec cb = Valid();
  cb.buffer_base = 0x60000;  // unmapped
  PokeLwpcb(mem, kLwpcbAddr, cb);
  EXPECT_EQ(Llwpcb(kLwpcbAddr, 3), MsrResult::kOk);
  EXPECT_EQ(CbU32(0), lwpcb::kFlagEnabled | lwpcb::flag_for_event(kEventInstructionsRetired));

  cb.buffer_base = kBufferAddr + 0x8000 - 128;  // 256 bytes, last 128 unmapped
  PokeLwpcb(mem, kLwpcbAddr, cb);
  EXPECT_EQ(Llwpcb(kLwpcbAddr, 0), MsrResult::kOk);

  cb.buffer_base = kBufferAddr;
  PokeLwpcb(mem, kLwpcbAddr, cb);
  mem.set_writable(kBufferAddr, 4096, false);  // read-only
  EXPECT_EQ(Llwpcb(kLwpcbAddr, 3), MsrResult::kOk);
  EXPECT_EQ(unit->stats().page_faults, 0u);  // nothing is stored at LLWPCB
}

// DESIGN §4.1 + lwp_unit.h: BufferBase not canonical, or a buffer that leaves the canonical half
// it starts in, is #GP.
TEST_F(LlwpcbTest, GpWhenBufferNotCanonical) {
  CbSpec cb = Valid();
  for (uint64_t base : {0x0000800000000000ull, 0x8000000000000000ull, 0xFFFF7FFFFFFFFF00ull,
                        0x00007FFFFFFFFF80ull /* 256 bytes: the last 128 not canonical */,
                        0xFFFFFFFFFFFFFF80ull /* wraps to 0 */}) {
    cb.buffer_base = base;
    PokeLwpcb(mem, kLwpcbAddr, cb);
    ExpectGp(kLwpcbAddr, 3);
    ExpectGp(kLwpcbAddr, 0);
  }
  for (uint64_t base : {0x00007FFFFFFFFF00ull - 0x20, 0xFFFF800000000000ull}) {
    cb.buffer_base = base;
    cb.buffer_size = base == 0xFFFF800000000000ull ? 256 : 0x120;  // ends at 0x7FFFFFFFFFFF
    PokeLwpcb(mem, kLwpcbAddr, cb);
    EXPECT_EQ(Llwpcb(kLwpcbAddr, 3), MsrResult::kOk) << std::hex << base;
    EXPECT_EQ(Llwpcb(0, 3), MsrResult::kOk);
  }
}

// Table 4: BufferHeadOffset "always < BufferSize and a multiple of LWPEventSize"; lwp_unit.h #GP.
TEST_F(LlwpcbTest, GpWhenHeadOffsetInvalid) {
  for (uint32_t head : {256u, 288u, 16u, 1u, 0xFFFFFFE0u}) {
    CbSpec cb = Valid();
    cb.head = head;
    PokeLwpcb(mem, kLwpcbAddr, cb);
    ExpectGp(kLwpcbAddr, 3);
  }
  CbSpec cb = Valid();
  cb.head = 224;
  cb.tail = 224;
  PokeLwpcb(mem, kLwpcbAddr, cb);
  EXPECT_EQ(Llwpcb(kLwpcbAddr), MsrResult::kOk);
}

// Table 4: BufferTailOffset "always < BufferSize and a multiple of LWPEventSize"; lwp_unit.h #GP.
TEST_F(LlwpcbTest, GpWhenTailOffsetInvalid) {
  for (uint32_t tail : {256u, 512u, 8u, 31u}) {
    CbSpec cb = Valid();
    cb.tail = tail;
    PokeLwpcb(mem, kLwpcbAddr, cb);
    ExpectGp(kLwpcbAddr, 3);
    ExpectGp(kLwpcbAddr, 0);
  }
}

// lwp_unit.h "#GP -> nothing changes": a rejected LLWPCB leaves the active LWPCB running untouched.
TEST_F(LlwpcbTest, GpLeavesActiveLwpUnchanged) {
  CbSpec cb = Valid();
  cb.slots = {{kEventInstructionsRetired, 3, 0}};
  PokeLwpcb(mem, kLwpcbAddr, cb);
  ASSERT_EQ(Llwpcb(kLwpcbAddr), MsrResult::kOk);
  RetirePlain(0, 2);  // counter 3 -> 1
  CbSpec bad = Valid();
  bad.flags = 0x5555;
  bad.buffer_size = 40;
  PokeLwpcb(mem, kLwpcbAddr2, bad);
  ExpectGp(kLwpcbAddr2, 3);
  ExpectGp(kLwpcbAddr2 + 4, 3);
  EXPECT_EQ(mem.peek_u32(kLwpcbAddr2), 0x5555u) << "rejected LWPCB's Flags untouched";
  EXPECT_EQ(CbCounter(0), 0u) << "old LWPCB not flushed by a rejected LLWPCB";
  EXPECT_EQ(Slwpcb(), kLwpcbAddr);
  RetirePlain(2, 1);  // third instruction: the counter reaches zero
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(RecordAt(kBufferAddr, 0).rip, RipOf(2));
}

// §5.3 + Figure 6: Flags = EN | bit n for each active EventId n | INT; garbage is overwritten.
TEST_F(LlwpcbTest, FlagsAreEnPlusActiveEvents) {
  CbSpec cb;
  cb.flags = 0x7FFFFFF0;
  cb.slots = {{kEventDcacheMisses, 10, 0},
              {kEventInstructionsRetired, 10, 0},
              {kEventBranchesRetired, 10, 0}};
  PokeLwpcb(mem, kLwpcbAddr, cb);
  ASSERT_EQ(Llwpcb(kLwpcbAddr), MsrResult::kOk);
  EXPECT_EQ(CbU32(0), 0x0000000Fu);
  EXPECT_EQ(Slwpcb(), kLwpcbAddr);
  EXPECT_TRUE(unit->wants_events());

  cb.slots = {{kEventBranchesRetired, 10, 0}};
  PokeLwpcb(mem, kLwpcbAddr2, cb);
  ASSERT_EQ(Llwpcb(kLwpcbAddr2), MsrResult::kOk);
  EXPECT_EQ(CbU32(0, kLwpcbAddr2), 0x00000005u);
}

// Figure 6 INT + DESIGN §4.2: INT = LWPMSR0.INT and Threshold != 0.
TEST_F(LlwpcbTest, FlagsIntRequiresMsr0IntAndThreshold) {
  CbSpec cb = Valid();
  cb.threshold = 64;
  PokeLwpcb(mem, kLwpcbAddr, cb);
  ASSERT_EQ(Llwpcb(kLwpcbAddr), MsrResult::kOk);
  EXPECT_EQ(CbU32(0), 0x80000003u);

  cb.threshold = 0;
  Reload(kLwpcbAddr, cb);
  EXPECT_EQ(CbU32(0), 0x00000003u);

  SetMsr0(msr0::kEnabled | msr0::kIre | msr0_vector(kVector));  // no INT
  cb.threshold = 64;
  Reload(kLwpcbAddr, cb);
  EXPECT_EQ(CbU32(0), 0x00000003u);
}

// §5.3: active events = requested ∩ enabled in LWPMSR0 (BRE withdrawn by the OS).
TEST_F(LlwpcbTest, ActiveEventsAreRequestedAndEnabledInLwpmsr0) {
  SetMsr0(msr0::kEnabled | msr0::kIre | msr0::kDme | msr0_vector(kVector));
  CbSpec cb;
  cb.slots = {
      {kEventInstructionsRetired, 1, 0}, {kEventBranchesRetired, 1, 0}, {kEventDcacheMisses, 1, 0}};
  PokeLwpcb(mem, kLwpcbAddr, cb);
  ASSERT_EQ(Llwpcb(kLwpcbAddr), MsrResult::kOk);
  EXPECT_EQ(CbU32(0), 0x0000000Bu);
  unit->retire(Branch(RipOf(0), BranchKind::kCall));
  unit->retire(Branch(RipOf(1), BranchKind::kCall));
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(RecordAt(kBufferAddr, 0).id, kEventInstructionsRetired);
  EXPECT_EQ(RecordAt(kBufferAddr, 32).id, kEventInstructionsRetired);
}

// §5.3: "none of the EventId fields select events that are implemented and enabled": ids the
// processor lacks (DME here) or that do not exist (4, 63) are not active.
TEST_F(LlwpcbTest, ActiveEventsAreAvailableOnly) {
  caps.dcache_misses = false;
  MakeUnit();
  SetMsr0(msr0::kEnabled | msr0::kIre | msr0::kBre | msr0::kInterrupt | msr0_vector(kVector));
  CbSpec cb;
  cb.slots = {{kEventDcacheMisses, 1, 0}, {4, 1, 0}, {kEventBranchesRetired, 1, 0}};
  PokeLwpcb(mem, kLwpcbAddr, cb);
  ASSERT_EQ(Llwpcb(kLwpcbAddr), MsrResult::kOk);
  EXPECT_EQ(CbU32(0), 0x00000005u);

  cb.slots = {{63, 1, 0}, {kEventDcacheMisses, 1, 0}, {0, 1, 0}};
  Reload(kLwpcbAddr, cb);
  EXPECT_EQ(CbU32(0), 0u);
  EXPECT_EQ(Slwpcb(), 0u);
}

// Table 2 MaxEvents: slots beyond LWPMaxEvents are not read, even if they name events.
TEST_F(LlwpcbTest, SlotsBeyondMaxEventsIgnored) {
  caps.max_events = 1;
  MakeUnit();
  SetMsr0(kMsr0AllFeatures | msr0_vector(kVector));
  CbSpec cb;
  cb.slots = {{kEventInstructionsRetired, 3, 0}, {kEventBranchesRetired, 1, 0}};
  PokeLwpcb(mem, kLwpcbAddr, cb);
  ASSERT_EQ(Llwpcb(kLwpcbAddr), MsrResult::kOk);
  EXPECT_EQ(CbU32(0), 0x00000003u);
  for (int i = 0; i < 6; ++i) unit->retire(Branch(RipOf(i), BranchKind::kReturn));
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(RecordAt(kBufferAddr, 0).id, kEventInstructionsRetired);
  EXPECT_EQ(RecordAt(kBufferAddr, 32).id, kEventInstructionsRetired);
}

// §5.3 duplicates: "only the earliest one in the LWPCB is used" (its interval, not the later
// one's).
TEST_F(LlwpcbTest, DuplicateEventIdEarliestWins) {
  CbSpec cb;
  cb.slots = {{kEventInstructionsRetired, 3, 0}, {kEventInstructionsRetired, 2, 0}};
  PokeLwpcb(mem, kLwpcbAddr, cb);
  const uint32_t slot1_word = CbU32(48);
  ASSERT_EQ(Llwpcb(kLwpcbAddr), MsrResult::kOk);
  EXPECT_EQ(CbU32(0), 0x00000003u);
  RetirePlain(0, 7);
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(RecordAt(kBufferAddr, 0).rip, RipOf(2));
  EXPECT_EQ(RecordAt(kBufferAddr, 32).rip, RipOf(5));
  EXPECT_EQ(Slwpcb(), kLwpcbAddr);
  // "it does not change the EventId field in the LWPCB"
  EXPECT_EQ(CbU32(48), slot1_word);
  EXPECT_EQ(CbU32(48) >> 26, 1u);
}

// lwp_unit.h: the earliest slot owns the id even with interval 0 (then the event is off).
TEST_F(LlwpcbTest, DuplicateEventIdEarliestWinsEvenWithIntervalZero) {
  CbSpec cb;
  cb.slots = {{kEventInstructionsRetired, 0, 0},
              {kEventInstructionsRetired, 2, 0},
              {kEventBranchesRetired, 1, 0}};
  PokeLwpcb(mem, kLwpcbAddr, cb);
  ASSERT_EQ(Llwpcb(kLwpcbAddr), MsrResult::kOk);
  EXPECT_EQ(CbU32(0), 0x00000005u);
  RetirePlain(0, 6);
  EXPECT_TRUE(stored.empty());
  EXPECT_EQ(CbU32(40) >> 26, 1u);
  EXPECT_EQ(CbU32(48) >> 26, 1u);
}

// §5.3: no events -> Flags 0, LWP disabled, SLWPCB returns 0.
TEST_F(LlwpcbTest, NoEventsFlagsZeroAndSlwpcbZero) {
  CbSpec cb;
  cb.flags = 0xFFFFFFFF;
  cb.slots = {{0, 5, 0}, {kEventBranchesRetired, 0, 0}};
  PokeLwpcb(mem, kLwpcbAddr, cb);
  ASSERT_EQ(Llwpcb(kLwpcbAddr), MsrResult::kOk);
  EXPECT_EQ(CbU32(0), 0u);
  EXPECT_EQ(Slwpcb(), 0u);
  EXPECT_EQ(unit->lwpcb_address(), 0u);
  EXPECT_FALSE(unit->wants_events());
  for (int i = 0; i < 8; ++i) unit->retire(Branch(RipOf(i), BranchKind::kCall));
  EXPECT_TRUE(stored.empty());
}

// §5.3 "To disable LWP, execute LLWPCB with rAX = 0"; lwp_unit.h: 0 is always accepted.
TEST_F(LlwpcbTest, AddressZeroDisablesAndFlushes) {
  CbSpec cb;
  cb.slots = {{kEventInstructionsRetired, 10, 0}};
  PokeLwpcb(mem, kLwpcbAddr, cb);
  ASSERT_EQ(Llwpcb(kLwpcbAddr), MsrResult::kOk);
  RetirePlain(0, 3);
  ASSERT_EQ(Llwpcb(0), MsrResult::kOk);
  EXPECT_EQ(Slwpcb(), 0u);
  EXPECT_EQ(unit->lwpcb_address(), 0u);
  EXPECT_FALSE(unit->wants_events());
  EXPECT_EQ(CbCounter(0), 7u) << "§5.3: active state flushed to the old LWPCB";
  RetirePlain(3, 20);
  EXPECT_TRUE(stored.empty());

  // 0 is accepted even with LWPMSR0.EN clear, at any CPL.
  SetMsr0(0);
  EXPECT_EQ(Llwpcb(0, 3), MsrResult::kOk);
  EXPECT_EQ(Llwpcb(0, 0), MsrResult::kOk);
}

// §5.3: "disable LWP by executing LLWPCB with rAX = 0 and then re-enable it ... with the old
// value": the flushed EventCounter continues.
TEST_F(LlwpcbTest, DisableAndReenableContinuesCounters) {
  CbSpec cb;
  cb.slots = {{kEventInstructionsRetired, 5, 0}};
  PokeLwpcb(mem, kLwpcbAddr, cb);
  ASSERT_EQ(Llwpcb(kLwpcbAddr), MsrResult::kOk);
  RetirePlain(0, 3);  // 5 -> 2
  ASSERT_EQ(Llwpcb(0), MsrResult::kOk);
  RetirePlain(100, 10);
  ASSERT_EQ(Llwpcb(kLwpcbAddr), MsrResult::kOk);
  RetirePlain(3, 2);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(RecordAt(kBufferAddr, 0).rip, RipOf(4));
  RetirePlain(5, 5);
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(RecordAt(kBufferAddr, 32).rip, RipOf(9));
}

// §5.3: "If LWP is currently active, it flushes its internal state to memory in the old LWPCB"
// (BufferHeadOffset and EventCounters), then sets up the new one.
TEST_F(LlwpcbTest, NewLlwpcbFlushesOldLwpcb) {
  CbSpec a;
  a.slots = {{kEventInstructionsRetired, 4, 0}, {kEventBranchesRetired, 100, 0}};
  PokeLwpcb(mem, kLwpcbAddr, a);
  ASSERT_EQ(Llwpcb(kLwpcbAddr), MsrResult::kOk);
  RetirePlain(0, 6);  // one record at 4, IR counter 2; BR counter untouched at 100
  unit->retire(Branch(RipOf(6), BranchKind::kConditional, false));  // IR 1, BR 99
  CbSpec b;
  b.buffer_base = kBuffer2Addr;
  b.slots = {{kEventBranchesRetired, 5, 0}};
  PokeLwpcb(mem, kLwpcbAddr2, b);
  ASSERT_EQ(Llwpcb(kLwpcbAddr2), MsrResult::kOk);
  EXPECT_EQ(CbHead(kLwpcbAddr), 32u);
  EXPECT_EQ(CbCounter(0, kLwpcbAddr), 1u);
  EXPECT_EQ(CbCounter(1, kLwpcbAddr), 99u);
  EXPECT_EQ(CbU32(40, kLwpcbAddr) >> 26, 1u) << "EventId untouched by the flush";
  EXPECT_EQ(CbU32(0, kLwpcbAddr2), 0x00000005u);
  EXPECT_EQ(Slwpcb(), kLwpcbAddr2);
  RetirePlain(7, 10);
  EXPECT_EQ(stored.size(), 1u) << "IR no longer counted";
}

// §5.3 SLWPCB: "Flushes the current state of LWP into the LWPCB ... returns the address"; LWP stays
// on.
TEST_F(LlwpcbTest, SlwpcbFlushesAndKeepsRunning) {
  CbSpec cb;
  cb.slots = {{kEventInstructionsRetired, 4, 0}};
  PokeLwpcb(mem, kLwpcbAddr, cb);
  ASSERT_EQ(Llwpcb(kLwpcbAddr), MsrResult::kOk);
  RetirePlain(0, 7);  // record at 3; counter 1
  EXPECT_EQ(Slwpcb(), kLwpcbAddr);
  EXPECT_EQ(CbHead(), 32u);
  EXPECT_EQ(CbCounter(0), 1u);
  RetirePlain(7, 1);
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(RecordAt(kBufferAddr, 32).rip, RipOf(7));
  EXPECT_EQ(Slwpcb(0), kLwpcbAddr);  // any privilege level
  EXPECT_EQ(CbHead(), 64u);
  EXPECT_EQ(CbCounter(0), 4u);
}

// lwp_unit.h: EventCounter 0 loads from the interval; a stored counter <= interval is used as is;
// a counter above interval|random-mask loads from the interval.
TEST_F(LlwpcbTest, EventCounterStartValue) {
  CbSpec cb;
  cb.slots = {{kEventInstructionsRetired, 10, 3}};
  PokeLwpcb(mem, kLwpcbAddr, cb);
  ASSERT_EQ(Llwpcb(kLwpcbAddr), MsrResult::kOk);
  RetirePlain(0, 13);
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(RecordAt(kBufferAddr, 0).rip, RipOf(2));
  EXPECT_EQ(RecordAt(kBufferAddr, 32).rip, RipOf(12));

  stored.clear();
  cb.slots = {{kEventInstructionsRetired, 10, 11}};
  Reload(kLwpcbAddr, cb);  // head back to 0
  RetirePlain(100, 11);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(RecordAt(kBufferAddr, 0).rip, RipOf(109));

  stored.clear();
  cb.slots = {{kEventInstructionsRetired, 10, 0}};
  Reload(kLwpcbAddr, cb);
  RetirePlain(200, 10);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(RecordAt(kBufferAddr, 0).rip, RipOf(209));
}

// §5.3 + lwp_unit.h: LLWPCB at CPL 0 only loads the pointer; nothing is written until enter_user().
TEST_F(LlwpcbTest, DeferredInitAtCpl0CompletedByEnterUser) {
  CbSpec cb;
  cb.flags = 0xAAAA;
  cb.slots = {{kEventInstructionsRetired, 2, 0}};
  PokeLwpcb(mem, kLwpcbAddr, cb);
  mem.clear_log();
  ASSERT_EQ(Llwpcb(kLwpcbAddr, 0), MsrResult::kOk);
  EXPECT_TRUE(mem.writes().empty());
  EXPECT_EQ(unit->lwpcb_address(), kLwpcbAddr);
  EXPECT_TRUE(unit->wants_events());
  EXPECT_EQ(CbU32(0), 0xAAAAu);
  unit->retire(Plain(RipOf(50), 0));  // kernel instruction: neither counts nor initialises
  EXPECT_TRUE(mem.writes().empty());
  EXPECT_EQ(CbU32(0), 0xAAAAu);
  unit->enter_user();
  EXPECT_EQ(CbU32(0), 0x00000003u);
  RetirePlain(0, 4);
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(RecordAt(kBufferAddr, 0).rip, RipOf(1));
  EXPECT_EQ(RecordAt(kBufferAddr, 32).rip, RipOf(3));
}

// lwp_unit.h: the first CPL-3 retire() completes a deferred LLWPCB and is itself counted.
TEST_F(LlwpcbTest, DeferredInitCompletedByFirstCpl3Retire) {
  CbSpec cb;
  cb.slots = {{kEventInstructionsRetired, 1, 0}};
  PokeLwpcb(mem, kLwpcbAddr, cb);
  ASSERT_EQ(Llwpcb(kLwpcbAddr, 0), MsrResult::kOk);
  EXPECT_EQ(CbU32(0), 0u);
  unit->retire(Plain(RipOf(0), 3));
  EXPECT_EQ(CbU32(0), 0x00000003u);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(RecordAt(kBufferAddr, 0).rip, RipOf(0));
}

// §5.3 deferral: counters and head are read from the LWPCB at the CPL-3 entry, not at LLWPCB.
TEST_F(LlwpcbTest, DeferredInitReadsLwpcbAtUserEntry) {
  CbSpec cb;
  cb.slots = {{kEventInstructionsRetired, 10, 0}};
  PokeLwpcb(mem, kLwpcbAddr, cb);
  ASSERT_EQ(Llwpcb(kLwpcbAddr, 0), MsrResult::kOk);
  mem.poke_u32(kLwpcbAddr + 16, 64);  // BufferHeadOffset
  mem.poke_u32(kLwpcbAddr + 20, 64);  // BufferTailOffset
  mem.poke_u32(kLwpcbAddr + 44, 2);   // EventCounter0
  unit->enter_user();
  RetirePlain(0, 2);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].address, kBufferAddr + 64);
  EXPECT_EQ(RecordAt(kBufferAddr, 64).rip, RipOf(1));
}

// lwp_unit.h: SLWPCB while initialisation is pending returns the pointer and flushes nothing.
TEST_F(LlwpcbTest, SlwpcbWhilePendingReturnsPointerWithoutFlush) {
  CbSpec cb;
  cb.head = 96;
  cb.tail = 96;
  cb.slots = {{kEventInstructionsRetired, 10, 7}};
  PokeLwpcb(mem, kLwpcbAddr, cb);
  ASSERT_EQ(Llwpcb(kLwpcbAddr, 0), MsrResult::kOk);
  mem.clear_log();
  EXPECT_EQ(Slwpcb(0), kLwpcbAddr);
  EXPECT_TRUE(mem.writes().empty());
  EXPECT_EQ(CbHead(), 96u);
  EXPECT_EQ(CbCounter(0), 7u);
}

// lwp_unit.h: if the LWPCB became invalid before the CPL-3 entry, LWP turns off, init_faults++.
TEST_F(LlwpcbTest, DeferredInitWithInvalidLwpcbTurnsLwpOff) {
  CbSpec cb;
  cb.slots = {{kEventInstructionsRetired, 1, 0}};
  PokeLwpcb(mem, kLwpcbAddr, cb);
  ASSERT_EQ(Llwpcb(kLwpcbAddr, 0), MsrResult::kOk);
  mem.set_writable(kLwpcbAddr, 4096, false);
  unit->enter_user();
  EXPECT_EQ(unit->lwpcb_address(), 0u);
  EXPECT_FALSE(unit->wants_events());
  EXPECT_EQ(unit->stats().init_faults, 1u);
  EXPECT_EQ(Slwpcb(), 0u);
  RetirePlain(0, 4);
  EXPECT_TRUE(stored.empty());
}

// §5.3 + lwp_unit.h: a deferred LLWPCB that finds no events ends with Flags 0 and SLWPCB 0.
TEST_F(LlwpcbTest, DeferredInitWithNoEventsDisables) {
  CbSpec cb;
  cb.flags = 0x1234;
  cb.slots = {{9, 1, 0}};
  PokeLwpcb(mem, kLwpcbAddr, cb);
  ASSERT_EQ(Llwpcb(kLwpcbAddr, 0), MsrResult::kOk);
  EXPECT_EQ(Slwpcb(0), kLwpcbAddr);
  unit->enter_user();
  EXPECT_EQ(CbU32(0), 0u);
  EXPECT_EQ(Slwpcb(), 0u);
  EXPECT_EQ(unit->stats().init_faults, 0u);
}

}  // namespace
}  // namespace pmu::lwp::conformance
