// pmu/state_archive.h, the model archives built on it, and the snapshot container
// (vmm/snapshot/state_sections.h): round trips, and every malformed input refused with a reason.
#include "pmu/state_archive.h"

#include <gtest/gtest.h>

#include <map>
#include <utility>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "pmu/branch/branch_predictor.h"
#include "pmu/cache/cache_model.h"
#include "vmm/cpu/cpuid_table.h"
#include "vmm/snapshot/state_sections.h"

namespace {

using pmu::StateFormatError;
using pmu::StateReader;
using pmu::StateWriter;

struct Sample {
  uint8_t a = 0;
  int32_t b = 0;
  bool c = false;
  std::string d;
  std::optional<uint64_t> e;
  std::vector<uint16_t> f;
  std::map<uint64_t, std::string> g;
  std::array<uint32_t, 3> h{};
  template <class A>
  void archive(A& ar) {
    ar(a, b, c, d, e, f, g, h);
  }
  bool operator==(const Sample&) const = default;
};

Sample filled() {
  Sample s;
  s.a = 0xAB, s.b = -5, s.c = true, s.d = "pmuvm", s.e = 0x1122334455667788ull;
  s.f = {1, 2, 0xFFFF};
  s.g = {{7, "seven"}, {1ull << 40, ""}};
  s.h = {1, 0xFFFFFFFFu, 3};
  return s;
}

TEST(StateArchive, RoundTripsEveryKind) {
  Sample in = filled();
  StateWriter w;
  w(in);
  Sample out;
  StateReader r(w.bytes());
  r(out);
  r.expect_end();
  EXPECT_EQ(out, in);
}

TEST(StateArchive, LittleEndianFixedWidth) {
  uint32_t v = 0x01020304;
  StateWriter w;
  w(v);
  ASSERT_EQ(w.bytes().size(), 4u);
  EXPECT_EQ(w.bytes()[0], std::byte{4});
  EXPECT_EQ(w.bytes()[3], std::byte{1});
}

TEST(StateArchive, EveryTruncationIsRefused) {
  Sample in = filled();
  StateWriter w;
  w(in);
  const std::vector<std::byte> bytes = w.take();
  for (size_t n = 0; n < bytes.size(); ++n) {
    Sample out;
    StateReader r(std::span<const std::byte>(bytes).first(n));
    EXPECT_THROW(r(out), StateFormatError) << "cut at " << n;
  }
}

TEST(StateArchive, HugeCountIsRefusedWithoutAllocating) {
  StateWriter w;
  uint64_t count = 1ull << 60;  // a vector "length" far beyond the blob
  w(count);
  std::vector<uint64_t> out;
  StateReader r(w.bytes());
  EXPECT_THROW(r(out), StateFormatError);
}

// Maps and lists of structures spend an element budget: the reader refuses a count over what is
// left before it allocates, and the writer refuses to write what the reader would refuse.
// Found by machine_state_fuzz: a map whose keys came out of order loaded (and was written back
// in order, other bytes than it came from); a repeated key overwrote the first value. A map loads
// only as the writer writes one: keys strictly in the map's order.
TEST(StateArchive, AMapLoadsOnlyWithItsKeysInOrderEachOnce) {
  auto map_of = [](std::vector<std::pair<uint64_t, uint32_t>> entries) {
    std::vector<std::byte> out;
    auto put = [&](uint64_t v, int n) {
      for (int i = 0; i < n; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
    };
    put(entries.size(), 8);
    for (const auto& [k, v] : entries) put(k, 8), put(v, 4);
    return out;
  };
  auto load = [](const std::vector<std::byte>& bytes) -> std::string {
    std::map<uint64_t, uint32_t> m;
    try {
      pmu::StateReader r(bytes);
      r(m);
      r.expect_end();
    } catch (const pmu::StateFormatError& e) {
      return e.what();
    }
    return "loaded " + std::to_string(m.size());
  };
  EXPECT_EQ(load(map_of({{0x1000, 1}, {0x2000, 2}})), "loaded 2");
  EXPECT_EQ(load(map_of({{0x2000, 2}, {0x1000, 1}})), "a map's keys are out of order or repeated");
  EXPECT_EQ(load(map_of({{0x1000, 1}, {0x1000, 2}})), "a map's keys are out of order or repeated");
}

TEST(StateArchive, TheElementBudgetHoldsForWriterAndReader) {
  std::map<uint32_t, std::vector<std::string>> nested = {{1, {"a", "b"}}, {2, {"c"}}};
  pmu::StateWriter ok;
  ok.set_element_budget(5);  // 2 map entries + 3 strings
  ok(nested);
  pmu::StateReader back(ok.bytes());
  back.set_element_budget(5);
  decltype(nested) read;
  back(read);
  EXPECT_EQ(read, nested);

  pmu::StateWriter over;
  over.set_element_budget(4);
  EXPECT_THROW(over(nested), pmu::StateFormatError);
  pmu::StateReader refused(ok.bytes());
  refused.set_element_budget(4);
  try {
    refused(read);
    ADD_FAILURE() << "read";
  } catch (const pmu::StateFormatError& e) {
    EXPECT_EQ(std::string(e.what()), "more than 4 elements (maps and lists) in one state blob");
  }
  // Vectors of integers are their bytes: no element is spent.
  std::vector<uint64_t> tags(1000, 7);
  pmu::StateWriter bulk;
  bulk.set_element_budget(0);
  bulk(tags);
}

TEST(StateArchive, TrailingBytesAndBadBooleansAreRefused) {
  StateWriter w;
  uint16_t two = 2;
  w(two);
  StateReader r(w.bytes());
  uint8_t one_byte = 0;
  r(one_byte);
  EXPECT_THROW(r.expect_end(), StateFormatError);
  bool flag = false;
  StateReader bad(w.bytes());
  EXPECT_THROW(bad(flag), StateFormatError);  // 2 is not a boolean
}

pmu::cache::Geometry geometry() {
  pmu::cache::Geometry g;
  g.line_size = 64;
  g.l1d = {4 * 2 * 64, 2, 4};
  g.l2 = {8 * 4 * 64, 4, 12};
  g.l3 = {16 * 4 * 64, 4, 40};
  g.dram_latency_cycles = 200;
  return g;
}

// A restored cache model continues exactly as the original: same hits, misses and latencies.
TEST(StateArchive, CacheModelContinuesIdentically) {
  pmu::cache::CacheModel original(geometry());
  std::mt19937_64 rng(7);
  for (int i = 0; i < 500; ++i) original.access(rng() % 16384, 8, rng() & 1);
  StateWriter w;
  w(original);
  pmu::cache::CacheModel restored(geometry());
  StateReader r(w.bytes());
  r(restored);
  r.expect_end();
  int misses = 0;
  for (int i = 0; i < 2000; ++i) {
    const uint64_t address = rng() % 6144;
    const auto a = original.load(address, 8);
    const auto b = restored.load(address, 8);
    ASSERT_EQ(a.has_value(), b.has_value()) << i;
    if (a) {
      ++misses;
      EXPECT_EQ(a->latency_cycles, b->latency_cycles);
      EXPECT_EQ(a->source, b->source);
    }
  }
  EXPECT_GT(misses, 100);  // the comparison saw both outcomes
  EXPECT_LT(misses, 1900);
}

TEST(StateArchive, BranchPredictorContinuesIdentically) {
  pmu::branch::BranchPredictor original;
  std::mt19937_64 rng(3);
  using pmu::BranchKind;
  const BranchKind kinds[] = {BranchKind::kConditional, BranchKind::kIndirectJump,
                              BranchKind::kCall, BranchKind::kReturn};
  auto one = [&](pmu::branch::BranchPredictor& p, uint64_t seed) {
    std::mt19937_64 g(seed);
    const BranchKind k = kinds[g() % 4];
    const uint64_t rip = 0x400000 + (g() % 64) * 16;
    const uint64_t next = g() & 1 ? rip + 2 : 0x500000 + (g() % 8) * 64;
    return p.resolve(k, k == BranchKind::kConditional || k == BranchKind::kCall, rip, rip + 2,
                     next);
  };
  for (int i = 0; i < 300; ++i) one(original, rng());
  StateWriter w;
  w(original);
  pmu::branch::BranchPredictor restored;
  StateReader r(w.bytes());
  r(restored);
  int mispredicted = 0;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t seed = rng();
    const auto a = one(original, seed);
    const auto b = one(restored, seed);
    ASSERT_EQ(a.predicted_correctly, b.predicted_correctly) << i;
    mispredicted += !a.predicted_correctly;
  }
  EXPECT_GT(mispredicted, 10);
}

TEST(StateSections, RoundTripAndChecks) {
  vmm::StateSections s;
  s.add("vcpu0.kvm", std::vector<std::byte>(100, std::byte{7}));
  s.add("report", {});
  const std::vector<std::byte> bytes = s.serialize();
  auto parsed = vmm::StateSections::parse(bytes);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed.value().all(), s.all());

  // Every single corrupted byte is found (magic, version, lengths, CRC or content).
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::vector<std::byte> bad = bytes;
    bad[i] ^= std::byte{0x10};
    EXPECT_TRUE(!(vmm::StateSections::parse(bad)).ok()) << i;
  }
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_TRUE(!(vmm::StateSections::parse(std::span<const std::byte>(bytes).first(n))).ok()) << n;
  std::vector<std::byte> longer = bytes;
  longer.push_back(std::byte{0});
  EXPECT_EQ((vmm::StateSections::parse(longer)).error().message,
            "state container has bytes after its last section");
  std::vector<std::byte> corrupt = bytes;
  corrupt.back() ^= std::byte{1};  // inside "vcpu0.kvm" (sections are in name order)
  EXPECT_EQ((vmm::StateSections::parse(corrupt)).error().message,
            "section \"vcpu0.kvm\" fails its CRC-32 check (corrupted)");
  std::vector<std::byte> version = bytes;
  version[8] = std::byte{9};
  EXPECT_EQ((vmm::StateSections::parse(version)).error().message,
            "state container format version 9 (this pmuvm reads " +
                std::to_string(vmm::kSnapshotFormatVersion) + ")");
}

// A component section carries its component's version; a reader of another version, a missing
// section and one too short to hold a version are each refused by name.
TEST(StateSections, ComponentSectionsCarryTheirVersion) {
  vmm::StateSections s;
  s.add_component("devices.cmos", 3, {std::byte{0xAA}, std::byte{0xBB}});
  s.add("short", {std::byte{1}});
  const auto back = vmm::StateSections::parse(s.serialize());
  ASSERT_TRUE(back.ok());
  const vmm::StateSections& r = back.value();
  EXPECT_EQ(*r.find("devices.cmos"),
            (std::vector<std::byte>{std::byte{3}, std::byte{0}, std::byte{0xAA}, std::byte{0xBB}}));
  auto ok = r.component("devices.cmos", 3);
  ASSERT_TRUE(ok.ok());
  const auto archive = ok.value();
  EXPECT_EQ(std::vector<std::byte>(archive.begin(), archive.end()),
            (std::vector<std::byte>{std::byte{0xAA}, std::byte{0xBB}}));
  EXPECT_EQ((r.component("devices.cmos", 4)).error().message,
            "the snapshot's devices.cmos state is version 3 (this pmuvm reads version 4)");
  EXPECT_EQ((r.component("devices.serial", 1)).error().message,
            "the snapshot has no devices.serial state");
  EXPECT_EQ((r.component("short", 1)).error().message, "the snapshot's short state has no version");
}

TEST(CpuidBitsMissing, NamesEachRegisterThatLacksBits) {
  using vmm::CpuidEntry;
  const std::vector<CpuidEntry> saw = {{1, 0, 0, 0x600f12, 0, 0x80200001, 0x178bfbff},
                                       {0x8000001C, 0, 0, 0x8000004F, 0, 0, 0x8000004F}};
  std::vector<CpuidEntry> offered = saw;
  EXPECT_TRUE(vmm::cpuid_bits_missing(saw, offered).empty());
  offered[0].ecx &= ~0x00200000u;  // x2apic gone
  offered[1].edx &= ~0x40u;        // an LWP event gone
  EXPECT_EQ(vmm::cpuid_bits_missing(saw, offered),
            (std::vector<std::string>{"CPUID 0x1.0 ECX: bits 0x200000 missing",
                                      "CPUID 0x8000001c.0 EDX: bits 0x40 missing"}));
  offered.pop_back();  // the whole LWP leaf gone
  EXPECT_EQ(vmm::cpuid_bits_missing(saw, offered).size(), 3u);
}

}  // namespace
