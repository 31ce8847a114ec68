// Conformance: LWPCB byte layout, proposal dialect (DESIGN §4.2; fields of proposal §5.4 Table 4),
// through pmu/lwp/lwpcb.h encode/decode and the field helpers.
#include <gtest/gtest.h>

#include <vector>

#include "pmu/lwp/architecture.h"
#include "pmu/lwp/lwpcb.h"
#include "tests/conformance/lwp_fixture.h"

namespace pmu::lwp::conformance {
namespace {

std::vector<std::byte> B(std::initializer_list<int> v) {
  std::vector<std::byte> out;
  for (int x : v) out.push_back(static_cast<std::byte>(x));
  return out;
}
std::vector<std::byte> Slice(const std::vector<std::byte>& v, size_t off, size_t n) {
  return std::vector<std::byte>(v.begin() + off, v.begin() + off + n);
}

Lwpcb Sample() {
  Lwpcb cb;
  cb.flags = 0x8000000B;
  cb.buffer_size = 0x0ABCDE0;  // bytes
  cb.random_bits = 0x5;
  cb.buffer_base = 0x1122334455667788ull;
  cb.head_offset = 0x00001240;
  cb.tail_offset = 0x00000FC0;
  cb.missed_events = 0x0102030405060708ull;
  cb.threshold = 0x00000800;
  cb.filters = 0x9F00003Au;  // NDB | OTH | RAM | RDC | NBC | CLF | MinLatency 0x3A
  cb.slots = {{kEventInstructionsRetired, 0x0123456, 0x0000010},
              {kEventDcacheMisses, 0x3FFFFFF, 0x3FFFFFF},
              {kEventBranchesRetired, 1, 0}};
  return cb;
}

// DESIGN §4.2 offsets 0..39: Flags, BufferSize|Random<<28, BufferBase, Head, Tail, MissedEvents,
// Threshold, Filters; little-endian.
TEST(LwpcbLayout, EncodeHeaderByteExact) {
  const auto bytes = encode_lwpcb(Sample());
  ASSERT_GE(bytes.size(), 40u);
  EXPECT_EQ(Slice(bytes, 0, 4), B({0x0B, 0x00, 0x00, 0x80}));
  EXPECT_EQ(Slice(bytes, 4, 4), B({0xE0, 0xCD, 0xAB, 0x50}));
  EXPECT_EQ(Slice(bytes, 8, 8), B({0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11}));
  EXPECT_EQ(Slice(bytes, 16, 4), B({0x40, 0x12, 0x00, 0x00}));
  EXPECT_EQ(Slice(bytes, 20, 4), B({0xC0, 0x0F, 0x00, 0x00}));
  EXPECT_EQ(Slice(bytes, 24, 8), B({0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01}));
  EXPECT_EQ(Slice(bytes, 32, 4), B({0x00, 0x08, 0x00, 0x00}));
  EXPECT_EQ(Slice(bytes, 36, 4), B({0x3A, 0x00, 0x00, 0x9F}));
}

// DESIGN §4.2 offsets 40+8i: EventInterval [25:0] | EventId [31:26]; 44+8i: EventCounter.
TEST(LwpcbLayout, EncodeSlotsByteExact) {
  const auto bytes = encode_lwpcb(Sample());
  ASSERT_EQ(bytes.size(), 64u);
  // 0x0123456 | 1 << 26 = 0x04123456
  EXPECT_EQ(Slice(bytes, 40, 8), B({0x56, 0x34, 0x12, 0x04, 0x10, 0x00, 0x00, 0x00}));
  // 0x3FFFFFF | 3 << 26 = 0x0FFFFFFF
  EXPECT_EQ(Slice(bytes, 48, 8), B({0xFF, 0xFF, 0xFF, 0x0F, 0xFF, 0xFF, 0xFF, 0x03}));
  // 1 | 2 << 26 = 0x08000001
  EXPECT_EQ(Slice(bytes, 56, 8), B({0x01, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00}));
}

// Figure 5: LWPCB Size = 40 + 8 * slots.
TEST(LwpcbLayout, EncodedSizeIs40Plus8PerSlot) {
  Lwpcb cb;
  EXPECT_EQ(encode_lwpcb(cb).size(), 40u);
  cb.slots.resize(1);
  EXPECT_EQ(encode_lwpcb(cb).size(), 48u);
  cb.slots.resize(26);
  EXPECT_EQ(encode_lwpcb(cb).size(), 248u);
  EXPECT_EQ(lwpcb::kFlags, 0u);
  EXPECT_EQ(lwpcb::kBufferSize, 4u);
  EXPECT_EQ(lwpcb::kBufferBase, 8u);
  EXPECT_EQ(lwpcb::kBufferHeadOffset, 16u);
  EXPECT_EQ(lwpcb::kBufferTailOffset, 20u);
  EXPECT_EQ(lwpcb::kMissedEvents, 24u);
  EXPECT_EQ(lwpcb::kThreshold, 32u);
  EXPECT_EQ(lwpcb::kFilters, 36u);
  EXPECT_EQ(lwpcb::kEventSlots, 40u);
}

// DESIGN §4.2: decode reads the same offsets (decode(encode(x)) == x; hand-made bytes decode).
TEST(LwpcbLayout, DecodeIsInverseOfEncode) {
  const Lwpcb cb = Sample();
  auto decoded = decode_lwpcb(encode_lwpcb(cb), 3);
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(*decoded, cb);

  // A hand-made image through the fixture's own writer.
  FakeGuestMemory mem;
  mem.map(0x1000, 4096);
  CbSpec spec;
  spec.flags = 0x7;
  spec.buffer_size = 4096;
  spec.random = 15;
  spec.buffer_base = 0x20001F;
  spec.head = 96;
  spec.tail = 32;
  spec.missed = 9;
  spec.threshold = 128;
  spec.filters = 0x01000005;
  spec.slots = {{2, 1000, 999}, {0, 0, 0}};
  PokeLwpcb(mem, 0x1000, spec);
  auto d = decode_lwpcb(mem.peek(0x1000, 56), 2);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->flags, 0x7u);
  EXPECT_EQ(d->buffer_size, 4096u);
  EXPECT_EQ(d->random_bits, 15);
  EXPECT_EQ(d->buffer_base, 0x20001Full);
  EXPECT_EQ(d->aligned_buffer_base(), 0x200000ull);
  EXPECT_EQ(d->head_offset, 96u);
  EXPECT_EQ(d->tail_offset, 32u);
  EXPECT_EQ(d->missed_events, 9u);
  EXPECT_EQ(d->threshold, 128u);
  EXPECT_EQ(d->filters, 0x01000005u);
  EXPECT_EQ(d->min_latency_units(), 5u);
  ASSERT_EQ(d->slots.size(), 2u);
  EXPECT_EQ(d->slots[0], (EventSlot{2, 1000, 999}));
  EXPECT_EQ(d->slots[1], (EventSlot{0, 0, 0}));
}

// DESIGN §4.2: fewer bytes than 40 + 8 * slot_count cannot be an LWPCB.
TEST(LwpcbLayout, DecodeRejectsShortInput) {
  const auto bytes = encode_lwpcb(Sample());
  EXPECT_FALSE(decode_lwpcb(std::span(bytes).first(63), 3).has_value());
  EXPECT_FALSE(decode_lwpcb(std::span(bytes).first(39), 0).has_value());
  EXPECT_TRUE(decode_lwpcb(std::span(bytes).first(40), 0).has_value());
  EXPECT_TRUE(decode_lwpcb(std::span(bytes).first(48), 1).has_value());
}

// lwpcb.h read_lwpcb: header + slot_count slots from guest memory; nullopt when unreadable.
TEST(LwpcbLayout, ReadLwpcbFromGuestMemory) {
  FakeGuestMemory mem;
  mem.map(0x5000, 4096);
  const auto bytes = encode_lwpcb(Sample());
  mem.poke(0x5000 + 4096 - 64, bytes);
  auto cb = read_lwpcb(mem, 0x5000 + 4096 - 64, 3);
  ASSERT_TRUE(cb.has_value());
  EXPECT_EQ(*cb, Sample());
  EXPECT_FALSE(read_lwpcb(mem, 0x5000 + 4096 - 56, 3).has_value());  // runs off the page
  EXPECT_FALSE(read_lwpcb(mem, 0x9000, 1).has_value());
}

// DESIGN §4.2 "little-endian": the single-field helpers.
TEST(LwpcbLayout, FieldHelpersLittleEndian) {
  FakeGuestMemory mem;
  mem.map(0x5000, 4096);
  ASSERT_TRUE(write_u32(mem, 0x5010, 0xA1B2C3D4u));
  EXPECT_EQ(mem.peek(0x5010, 4), B({0xD4, 0xC3, 0xB2, 0xA1}));
  ASSERT_TRUE(write_u64(mem, 0x5018, 0x0102030405060708ull));
  EXPECT_EQ(mem.peek(0x5018, 8), B({0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01}));
  uint32_t v32 = 0;
  uint64_t v64 = 0;
  ASSERT_TRUE(read_u32(mem, 0x5010, v32));
  EXPECT_EQ(v32, 0xA1B2C3D4u);
  ASSERT_TRUE(read_u64(mem, 0x5018, v64));
  EXPECT_EQ(v64, 0x0102030405060708ull);
  EXPECT_FALSE(read_u32(mem, 0x5FFE, v32));  // crosses into an unmapped page
  EXPECT_FALSE(read_u64(mem, 0x9000, v64));
  mem.set_writable(0x5000, 4096, false);
  EXPECT_FALSE(write_u32(mem, 0x5010, 1));
  EXPECT_FALSE(write_u64(mem, 0x5018, 1));
  EXPECT_EQ(mem.peek_u32(0x5010), 0xA1B2C3D4u);
}

}  // namespace
}  // namespace pmu::lwp::conformance
