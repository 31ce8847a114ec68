// Conformance: the event ring buffer (proposal §3 Store/Report, §5.4 Table 4 BufferHeadOffset,
// BufferTailOffset, MissedEvents, Threshold; §5.5.3 LWPCB access; lwp_unit.h choices).
#include <gtest/gtest.h>

#include <vector>

#include "pmu/lwp/architecture.h"
#include "pmu/lwp/lwp_unit.h"
#include "tests/conformance/lwp_fixture.h"

namespace pmu::lwp::conformance {
namespace {

class RingTest : public LwpFixture {
 protected:
  static CbSpec Ring(uint32_t size, uint32_t head = 0, uint32_t tail = 0, uint32_t threshold = 0) {
    CbSpec cb;
    cb.buffer_size = size;
    cb.head = head;
    cb.tail = tail;
    cb.threshold = threshold;
    cb.slots = {{kEventInstructionsRetired, 1, 0}};
    return cb;
  }
  void One(int i) { unit->retire(Plain(RipOf(i))); }
  size_t TailReads() const { return ReadsCovering(kLwpcbAddr + 20, 4); }
  void SetTail(uint32_t tail) { mem.poke_u32(kLwpcbAddr + 20, tail); }
};

// Table 4: records go to BufferBase + BufferHeadOffset; the head advances by 32 and wraps at
// BufferSize; the head starts where the LWPCB says.
TEST_F(RingTest, HeadAdvancesBy32AndWraps) {
  Start(Ring(128, 64, 64));
  for (int i = 0; i < 3; ++i) One(i);
  ASSERT_EQ(stored.size(), 3u);
  EXPECT_EQ(stored[0].address, kBufferAddr + 64);
  EXPECT_EQ(stored[1].address, kBufferAddr + 96);
  EXPECT_EQ(stored[2].address, kBufferAddr + 0);
  EXPECT_EQ(RecordAt(kBufferAddr, 64).rip, RipOf(0));
  EXPECT_EQ(RecordAt(kBufferAddr, 96).rip, RipOf(1));
  EXPECT_EQ(RecordAt(kBufferAddr, 0).rip, RipOf(2));
  EXPECT_FALSE(stored[2].missed);
  EXPECT_EQ(Slwpcb(), kLwpcbAddr);
  EXPECT_EQ(CbHead(), 32u);
  EXPECT_EQ(CbU64(24), 0u);
}

// Table 4 BufferBase: "the low 5 bits of BufferBase are ignored" (also by the writability check).
TEST_F(RingTest, BufferBaseLowBitsIgnored) {
  CbSpec cb = Ring(64);
  cb.buffer_base = (kBufferAddr + 0x8000 - 64) | 0x1F;  // the raw value + 64 runs off the mapping
  Start(cb);
  One(0);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].address, kBufferAddr + 0x8000 - 64);
  EXPECT_EQ(RecordAt(kBufferAddr + 0x8000 - 64, 0).rip, RipOf(0));
}

// Table 4 MissedEvents: when the advanced head would equal the tail, the record is stored but the
// head stays, MissedEvents + 1: the last record is overwritten.
TEST_F(RingTest, FullIncrementsMissedEventsAndOverwritesLastRecord) {
  Start(Ring(128));
  for (int i = 0; i < 3; ++i) One(i);
  EXPECT_EQ(unit->stats().records_missed, 0u);
  One(3);
  ASSERT_EQ(stored.size(), 4u);
  EXPECT_TRUE(stored[3].missed);
  EXPECT_EQ(stored[3].address, kBufferAddr + 96);
  EXPECT_EQ(RecordAt(kBufferAddr, 96).rip, RipOf(3));
  EXPECT_EQ(CbU64(24), 1u);
  EXPECT_EQ(CbHead(), 96u) << "head written to the LWPCB when the buffer is full";
  One(4);
  ASSERT_EQ(stored.size(), 5u);
  EXPECT_TRUE(stored[4].missed);
  EXPECT_EQ(stored[4].address, kBufferAddr + 96);
  EXPECT_EQ(RecordAt(kBufferAddr, 96).rip, RipOf(4));
  EXPECT_EQ(CbU64(24), 2u);
  EXPECT_EQ(CbHead(), 96u);
  EXPECT_EQ(RecordAt(kBufferAddr, 0).rip, RipOf(0));
  EXPECT_EQ(RecordAt(kBufferAddr, 32).rip, RipOf(1));
  EXPECT_EQ(RecordAt(kBufferAddr, 64).rip, RipOf(2));
  EXPECT_EQ(unit->stats().records_stored, 3u);
  EXPECT_EQ(unit->stats().records_missed, 2u);
}

// §3 Reset: "Reset happens if the event record is stored or if the missed event counter was
// incremented" - the interval cadence goes on while the buffer is full.
TEST_F(RingTest, CounterReloadsAfterMissedEvent) {
  CbSpec cb = Ring(64);
  cb.slots = {{kEventInstructionsRetired, 3, 0}};
  Start(cb);
  for (int i = 0; i < 12; ++i) One(i);
  ASSERT_EQ(stored.size(), 4u);
  EXPECT_EQ(ParseRecord(Bytes(stored[0].bytes)).rip, RipOf(2));
  EXPECT_EQ(ParseRecord(Bytes(stored[1].bytes)).rip, RipOf(5));
  EXPECT_EQ(ParseRecord(Bytes(stored[2].bytes)).rip, RipOf(8));
  EXPECT_EQ(ParseRecord(Bytes(stored[3].bytes)).rip, RipOf(11));
  EXPECT_EQ(CbU64(24), 3u);
}

// §5.5.3 "The MissedEvents value ... may be left in memory" + lwp_unit.h: read-modify-write.
TEST_F(RingTest, MissedEventsIsReadModifyWriteInMemory) {
  CbSpec cb = Ring(64);
  cb.missed = 7;
  Start(cb);
  One(0);
  One(1);  // full
  EXPECT_EQ(CbU64(24), 8u);
  mem.poke_u64(kLwpcbAddr + 24, 0x00000001FFFFFFFFull);
  One(2);
  EXPECT_EQ(CbU64(24), 0x0000000200000000ull);
}

// §5.5.3: when the buffer looks full the tail is re-read; space freed by software is used.
TEST_F(RingTest, TailRereadWhenFullFindsSpace) {
  Start(Ring(128));
  for (int i = 0; i < 3; ++i) One(i);  // head 96
  SetTail(64);                         // software consumed two records
  One(3);                              // at 96, head wraps to 0
  One(4);                              // at 0, head 32
  One(5);                              // at 32, head would be 64 == tail: missed
  ASSERT_EQ(stored.size(), 6u);
  EXPECT_FALSE(stored[3].missed);
  EXPECT_FALSE(stored[4].missed);
  EXPECT_TRUE(stored[5].missed);
  EXPECT_EQ(stored[3].address, kBufferAddr + 96);
  EXPECT_EQ(stored[4].address, kBufferAddr + 0);
  EXPECT_EQ(stored[5].address, kBufferAddr + 32);
  EXPECT_EQ(CbU64(24), 1u);
  EXPECT_EQ(CbHead(), 32u);
}

// §5.5.3: "need not read the software-maintained tail pointer unless it detects a threshold or
// buffer full condition": no read of LWPCB+20 while neither holds; a read when full looks true.
TEST_F(RingTest, TailReadOnlyWhenFullLooksTrue) {
  Start(Ring(256));
  mem.clear_log();
  for (int i = 0; i < 7; ++i) One(i);  // head 224: not full
  EXPECT_EQ(TailReads(), 0u);
  EXPECT_EQ(unit->stats().tail_rereads, 0u);
  One(7);  // head would wrap to 0 == cached tail: looks full
  EXPECT_GE(TailReads(), 1u);
  EXPECT_GE(unit->stats().tail_rereads, 1u);
  EXPECT_TRUE(stored[7].missed);
}

// Table 4 Threshold: interrupt when space used == Threshold, exactly once per crossing; vector is
// LWPMSR0[47:40] (DESIGN §4.1); head forced to the LWPCB at the threshold (§5.5.3).
TEST_F(RingTest, ThresholdInterruptAtEquality) {
  Start(Ring(256, 0, 0, 96));
  EXPECT_EQ(CbU32(0), 0x80000003u);
  One(0);
  One(1);
  EXPECT_TRUE(sink.vectors.empty());
  One(2);  // space used 96
  EXPECT_EQ(sink.vectors, (std::vector<uint8_t>{kVector}));
  EXPECT_EQ(CbHead(), 96u);
  One(3);
  One(4);
  One(5);
  EXPECT_EQ(sink.vectors.size(), 1u);
  EXPECT_EQ(sink.nmis, 0);
  EXPECT_EQ(unit->stats().interrupts, 1u);
}

// Table 4: space used = (head - tail) % BufferSize, also across the wrap.
TEST_F(RingTest, ThresholdSpaceUsedAcrossWrap) {
  Start(Ring(256, 192, 192, 96));
  One(0);  // at 192 -> 224
  One(1);  // at 224 -> 0
  EXPECT_TRUE(sink.vectors.empty());
  One(2);  // at 0 -> 32: used (32 - 192) mod 256 = 96
  EXPECT_EQ(sink.vectors, (std::vector<uint8_t>{kVector}));
  EXPECT_EQ(CbHead(), 32u);
}

// DESIGN §4.1: the vector is whatever LWPMSR0[47:40] holds.
TEST_F(RingTest, ThresholdVectorFromLwpmsr0) {
  Start(Ring(256, 0, 0, 32), kMsr0AllFeatures | msr0_vector(0xEE));
  One(0);
  EXPECT_EQ(sink.vectors, (std::vector<uint8_t>{0xEE}));
}

// Table 4 + §5.5.3: after software drains, the next time space used == Threshold interrupts again;
// a stale cached tail must not hide it (re-read while the threshold condition appears true).
TEST_F(RingTest, InterruptAgainAfterSoftwareDrains) {
  Start(Ring(256, 0, 0, 64));
  One(0);
  One(1);  // used 64
  ASSERT_EQ(sink.vectors.size(), 1u);
  SetTail(64);  // the handler consumed both records
  One(2);       // head 96, used 32
  EXPECT_EQ(sink.vectors.size(), 1u);
  One(3);  // head 128, used 64
  EXPECT_EQ(sink.vectors.size(), 2u);
  One(4);
  EXPECT_EQ(sink.vectors.size(), 2u);
  EXPECT_EQ(unit->stats().interrupts, 2u);
}

// §5.5.3: the tail is re-read when the threshold condition appears true, not before.
TEST_F(RingTest, TailReadWhenThresholdLooksTrue) {
  Start(Ring(256, 0, 0, 96));
  mem.clear_log();
  One(0);
  One(1);
  EXPECT_EQ(TailReads(), 0u);
  One(2);
  EXPECT_GE(TailReads(), 1u);
}

// Figure 6 INT: no interrupt without LWPMSR0.INT or with Threshold 0.
TEST_F(RingTest, NoInterruptWithoutIntOrThreshold) {
  Start(Ring(256, 0, 0, 32), msr0::kEnabled | msr0::kIre | msr0_vector(kVector));
  EXPECT_EQ(CbU32(0), 0x3u);
  for (int i = 0; i < 10; ++i) One(i);
  EXPECT_TRUE(sink.vectors.empty());
  SetMsr0(kMsr0AllFeatures | msr0_vector(kVector));
  Reload(kLwpcbAddr, Ring(256, 0, 0, 0));
  for (int i = 0; i < 10; ++i) One(i);
  EXPECT_TRUE(sink.vectors.empty());
  EXPECT_EQ(unit->stats().interrupts, 0u);
}

// lwp_unit.h: LWPMSR0.INT is checked again at each interrupt.
TEST_F(RingTest, Lwpmsr0IntCheckedAtEachInterrupt) {
  Start(Ring(256, 0, 0, 32));
  SetMsr0(msr0::kEnabled | msr0::kIre | msr0_vector(kVector));  // OS withdraws INT
  One(0);                                                       // used 32
  EXPECT_TRUE(sink.vectors.empty());
  SetTail(32);
  SetMsr0(kMsr0AllFeatures | msr0_vector(kVector));  // INT back
  One(1);                                            // head 64, used 32 again
  EXPECT_EQ(sink.vectors, (std::vector<uint8_t>{kVector}));
}

// lwp_unit.h: a re-read tail that is not < BufferSize or not a multiple of 32 is ignored.
TEST_F(RingTest, InvalidRereadTailIgnored) {
  Start(Ring(128));
  for (int i = 0; i < 3; ++i) One(i);
  SetTail(48);
  One(3);
  EXPECT_TRUE(stored[3].missed);
  SetTail(128);
  One(4);
  EXPECT_TRUE(stored[4].missed);
  EXPECT_EQ(CbU64(24), 2u);
  EXPECT_EQ(CbHead(), 96u);
  SetTail(32);
  One(5);  // now valid: head 96 -> 0
  EXPECT_FALSE(stored[5].missed);
  EXPECT_EQ(stored[5].address, kBufferAddr + 96);
}

// §5.5.3 + lwp_unit.h: the head reaches the LWPCB on flush (SLWPCB) even below the threshold.
TEST_F(RingTest, HeadWrittenOnFlush) {
  Start(Ring(256, 0, 0, 128));
  One(0);
  One(1);
  EXPECT_EQ(Slwpcb(), kLwpcbAddr);
  EXPECT_EQ(CbHead(), 64u);
  EXPECT_TRUE(sink.vectors.empty());
}

}  // namespace
}  // namespace pmu::lwp::conformance
