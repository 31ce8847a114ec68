// Conformance: event record images (proposal §4, Figures 1-4; §4.3.1 latency), byte by byte,
// through pmu/lwp/event_record.h.
#include <gtest/gtest.h>

#include <vector>

#include "pmu/lwp/architecture.h"
#include "pmu/lwp/event_record.h"
#include "tests/conformance/lwp_fixture.h"

namespace pmu::lwp::conformance {
namespace {

std::vector<std::byte> B(std::initializer_list<int> v) {
  std::vector<std::byte> out;
  for (int x : v) out.push_back(static_cast<std::byte>(x));
  return out;
}

// Figure 2: id 1, CoreId, 2:7 reserved, 8:15 RIP, 16:31 reserved.
TEST(EventRecord, InstructionsRetiredByteImage) {
  auto r = encode_instructions_retired(0x07, 0x00007FFF12345678ull);
  EXPECT_EQ(Bytes(r), B({0x01, 0x07, 0, 0, 0, 0, 0, 0, 0x78, 0x56, 0x34, 0x12, 0xFF, 0x7F, 0, 0,
                         0,    0,    0, 0, 0, 0, 0, 0, 0,    0,    0,    0,    0,    0,    0, 0}));
  EXPECT_EQ(r.size(), 32u);
}

// Figure 3: taken (31), predicted correctly (30), prediction valid (29): byte 3 = 0xE0.
TEST(EventRecord, BranchTakenPredictedByteImage) {
  BranchInfo b{BranchKind::kConditional, true, 0xFFFFFFFF80001000ull, true, true};
  auto r = encode_branch_retired(0xA5, 0x401000, b);
  EXPECT_EQ(Bytes(r),
            B({0x02, 0xA5, 0x00, 0xE0, 0,    0,    0,    0,    0x00, 0x10, 0x40, 0, 0, 0, 0, 0,
               0x00, 0x10, 0x00, 0x80, 0xFF, 0xFF, 0xFF, 0xFF, 0,    0,    0,    0, 0, 0, 0, 0}));
}

// Figure 3: not taken -> bit 31 clear, bytes 16:23 = fall-through; no prediction info -> 29 clear.
TEST(EventRecord, BranchNotTakenWithoutPredictionInfo) {
  BranchInfo b{BranchKind::kConditional, false, 0x401006, false, false};
  auto r = encode_branch_retired(0, 0x401004, b);
  EXPECT_EQ(Bytes(r), B({0x02, 0x00, 0x00, 0x00, 0, 0, 0, 0, 0x04, 0x10, 0x40, 0, 0, 0, 0, 0,
                         0x06, 0x10, 0x40, 0,    0, 0, 0, 0, 0,    0,    0,    0, 0, 0, 0, 0}));
}

// Figure 3: mispredicted but valid prediction info -> bits 29 and 31 only (byte 3 = 0xA0);
// valid prediction + not taken + correct -> 0x60.
TEST(EventRecord, BranchMispredictedAndNotTakenPredicted) {
  BranchInfo mis{BranchKind::kReturn, true, 0x500000, true, false};
  auto r = encode_branch_retired(1, 0x400000, mis);
  EXPECT_EQ(static_cast<int>(r[3]), 0xA0);
  EXPECT_EQ(static_cast<int>(r[2]), 0x00);
  BranchInfo nt{BranchKind::kConditional, false, 0x400002, true, true};
  auto r2 = encode_branch_retired(1, 0x400000, nt);
  EXPECT_EQ(static_cast<int>(r2[3]), 0x60);
  BranchInfo tk{BranchKind::kIndirectJump, true, 0x600000, false, false};
  auto r3 = encode_branch_retired(1, 0x400000, tk);
  EXPECT_EQ(static_cast<int>(r3[3]), 0x80);
  for (auto* rec : {&r, &r2, &r3}) {
    const Rec p = ParseRecord(Bytes(*rec));
    EXPECT_EQ(p.data, 0u);
    EXPECT_EQ(p.reserved, 0u);
    EXPECT_EQ(p.dword0 & 0x1FFF0000u, 0u) << "bits 16:28 reserved";
  }
}

// Figure 4: id 3, bit 28 address valid, 31:29 source, 4:7 latency, 8:15 RIP, 16:23 data address.
TEST(EventRecord, DcacheMissByteImage) {
  CacheMiss m{0x00007F0000001234ull, 300, DataSource::kDram};
  auto r = encode_dcache_miss(0x03, 0x401234, m, true, 1008);
  // dword0 = 3 | 3<<8 | 1<<28 | 3<<29 = 0x70000303; latency 300 -> 288 = 0x120
  EXPECT_EQ(Bytes(r),
            B({0x03, 0x03, 0x00, 0x70, 0x20, 0x01, 0x00, 0x00, 0x34, 0x12, 0x40, 0, 0, 0, 0, 0,
               0x34, 0x12, 0x00, 0x00, 0x00, 0x7F, 0x00, 0x00, 0,    0,    0,    0, 0, 0, 0, 0}));
}

// Figure 4 data source codes: 0 none, 1 local L3 (NB), 2 remote, 3 DRAM, 7 other; L2 has none -> 0.
TEST(EventRecord, DcacheDataSourceCodes) {
  EXPECT_EQ(data_source_code(DataSource::kNoValidStatus), 0);
  EXPECT_EQ(data_source_code(DataSource::kLocalL3), 1);
  EXPECT_EQ(data_source_code(DataSource::kRemoteCache), 2);
  EXPECT_EQ(data_source_code(DataSource::kDram), 3);
  EXPECT_EQ(data_source_code(DataSource::kOther), 7);
  EXPECT_EQ(data_source_code(DataSource::kL2), 0);
  const std::pair<DataSource, int> byte3[] = {
      {DataSource::kNoValidStatus, 0x10}, {DataSource::kLocalL3, 0x30},
      {DataSource::kRemoteCache, 0x50},   {DataSource::kDram, 0x70},
      {DataSource::kOther, 0xF0},         {DataSource::kL2, 0x10}};
  for (auto [src, expect] : byte3) {
    auto r = encode_dcache_miss(0, 0x1000, CacheMiss{0x2000, 16, src}, true, 1008);
    EXPECT_EQ(static_cast<int>(r[3]), expect) << static_cast<int>(src);
    EXPECT_EQ(static_cast<int>(r[2]), 0);
  }
}

// Table 2 ECX 5 = 0: "data address is not reported": bit 28 clear, bytes 16:23 zero.
TEST(EventRecord, DcacheWithoutDataAddressSupport) {
  CacheMiss m{0x00007F0000001234ull, 64, DataSource::kLocalL3};
  auto r = encode_dcache_miss(0x09, 0x401234, m, false, 1008);
  EXPECT_EQ(Bytes(r),
            B({0x03, 0x09, 0x00, 0x20, 0x40, 0x00, 0x00, 0x00, 0x34, 0x12, 0x40, 0, 0, 0, 0, 0,
               0,    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,    0, 0, 0, 0, 0}));
}

// §4.3.1: latency rounded down to a multiple of 16, saturating at 2^n - 16.
TEST(EventRecord, ReportedLatencyRoundsDownAndCaps) {
  EXPECT_EQ(reported_latency(0, 1008), 0u);
  EXPECT_EQ(reported_latency(15, 1008), 0u);
  EXPECT_EQ(reported_latency(16, 1008), 16u);
  EXPECT_EQ(reported_latency(31, 1008), 16u);
  EXPECT_EQ(reported_latency(1000, 1008), 992u);
  EXPECT_EQ(reported_latency(1008, 1008), 1008u);
  EXPECT_EQ(reported_latency(1023, 1008), 1008u);
  EXPECT_EQ(reported_latency(1024, 1008), 1008u);
  EXPECT_EQ(reported_latency(0xFFFFFFFFu, 1008), 1008u);
  EXPECT_EQ(reported_latency(70000, 65520), 65520u);
  EXPECT_EQ(reported_latency(0xFFFFFFFFu, 0x7FFFFFF0u), 0x7FFFFFF0u);
  EXPECT_EQ(reported_latency(0x12345678u, 0x7FFFFFF0u), 0x12345670u);
}

// §4.3.1 in the record: bytes 4:7 carry the rounded, capped latency.
TEST(EventRecord, DcacheRecordLatencyCapped) {
  auto r = encode_dcache_miss(0, 0x1000, CacheMiss{0x2000, 5000, DataSource::kDram}, true, 1008);
  EXPECT_EQ(ParseRecord(Bytes(r)).data, 1008u);
  auto r2 = encode_dcache_miss(0, 0x1000, CacheMiss{0x2000, 5000, DataSource::kDram}, true, 65520);
  EXPECT_EQ(ParseRecord(Bytes(r2)).data, 4992u);
  auto r3 = encode_dcache_miss(0, 0x1000, CacheMiss{0x2000, 7, DataSource::kDram}, true, 1008);
  EXPECT_EQ(ParseRecord(Bytes(r3)).data, 0u);
}

// Figure 1: decode_record splits any record into its generic fields.
TEST(EventRecord, DecodeRecordGenericFields) {
  EventRecordBytes raw{};
  const auto img =
      B({0x02, 0x11, 0x34, 0xE0, 0x78, 0x56, 0x34, 0x12, 1,  2,  3,  4,  5,  6,  7,  8,
         9,    10,   11,   12,   13,   14,   15,   16,   17, 18, 19, 20, 21, 22, 23, 24});
  std::copy(img.begin(), img.end(), raw.begin());
  DecodedRecord d = decode_record(raw);
  EXPECT_EQ(d.event_id, 2);
  EXPECT_EQ(d.core_id, 0x11);
  EXPECT_EQ(d.flags, 0xE034);
  EXPECT_EQ(d.data, 0x12345678u);
  EXPECT_EQ(d.rip, 0x0807060504030201ull);
  EXPECT_EQ(d.address, 0x100F0E0D0C0B0A09ull);
  EXPECT_EQ(d.reserved, 0x1817161514131211ull);

  BranchInfo b{BranchKind::kCall, true, 0xABCDEF, true, true};
  DecodedRecord e = decode_record(encode_branch_retired(4, 0x1234, b));
  EXPECT_EQ(e, (DecodedRecord{2, 4, 0xE000, 0, 0x1234, 0xABCDEF, 0}));
  DecodedRecord f = decode_record(
      encode_dcache_miss(5, 0x99, CacheMiss{0x77, 40, DataSource::kOther}, true, 1008));
  EXPECT_EQ(f, (DecodedRecord{3, 5, 0xF000, 32, 0x99, 0x77, 0}));
}

}  // namespace
}  // namespace pmu::lwp::conformance
