// The cache hierarchy model: exact hit/miss sequences for known access patterns, LRU order,
// misaligned accesses, and geometry validation.
#include "pmu/cache/cache_model.h"

#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "pmu/state_archive.h"

namespace pmu::cache {
namespace {

// Tiny hierarchy so sequences are easy to follow: L1 2 sets x 2 ways, L2 4 sets x 2 ways,
// L3 8 sets x 2 ways, 64-byte lines.
Geometry tiny() {
  Geometry g;
  g.line_size = 64;
  g.l1d = {2 * 2 * 64, 2, 4};
  g.l2 = {4 * 2 * 64, 2, 12};
  g.l3 = {8 * 2 * 64, 2, 40};
  g.dram_latency_cycles = 200;
  return g;
}

TEST(CacheModelTest, ColdMissComesFromDramThenHitsL1) {
  CacheModel c(tiny());
  auto m = c.load(0x1000, 8);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->source, DataSource::kDram);
  EXPECT_EQ(m->latency_cycles, 200u);
  EXPECT_EQ(m->data_address, 0x1000u);
  EXPECT_FALSE(c.load(0x1008, 8).has_value());  // same line
}

TEST(CacheModelTest, LruEvictsLeastRecentlyUsedWay) {
  CacheModel c(tiny());
  // Lines 0, 2, 4 all map to L1 set 0 (2 sets).
  c.load(0 * 64, 8);
  c.load(2 * 64, 8);
  c.load(0 * 64, 8);  // line 0 most recent
  c.load(4 * 64, 8);  // evicts line 2 from L1
  EXPECT_FALSE(c.load(0 * 64, 8).has_value());
  auto m = c.load(2 * 64, 8);  // back from L2
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->source, DataSource::kL2);
  EXPECT_EQ(m->latency_cycles, 12u);
}

TEST(CacheModelTest, WorkingSetLargerThanL2ComesFromL3) {
  CacheModel c(tiny());
  // 12 lines: more than L2 (8 lines) but fits in L3 (16 lines). Sequential streaming, twice.
  for (int i = 0; i < 12; ++i) c.load(i * 64, 8);
  int l3 = 0;
  for (int i = 0; i < 12; ++i) {
    auto m = c.load(i * 64, 8);
    ASSERT_TRUE(m.has_value()) << i;
    l3 += m->source == DataSource::kLocalL3;
  }
  EXPECT_EQ(l3, 12);
}

TEST(CacheModelTest, StridedWorkingSetLargerThanL3MissesEveryTime) {
  CacheModel c(tiny());
  for (int pass = 0; pass < 3; ++pass)
    for (int i = 0; i < 32; ++i) {
      auto m = c.load(i * 64, 8);
      ASSERT_TRUE(m.has_value());
      EXPECT_EQ(m->source, DataSource::kDram);
    }
}

TEST(CacheModelTest, MisalignedLoadReportsLowestMissingAddressAndFarthestLevel) {
  CacheModel c(tiny());
  c.load(0x40, 8);           // second line warm in L1
  auto m = c.load(0x3C, 8);  // spans 0x00 line (cold) and 0x40 line (L1)
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->data_address, 0x3Cu);
  EXPECT_EQ(m->source, DataSource::kDram);
  CacheModel d(tiny());
  d.load(0x00, 8);  // first line warm
  auto n = d.load(0x3C, 8);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->data_address, 0x40u);  // only the second line missed
}

TEST(CacheModelTest, NoL3GoesStraightToDram) {
  Geometry g = tiny();
  g.l3 = {};
  CacheModel c(g);
  for (int i = 0; i < 12; ++i) c.load(i * 64, 8);
  auto m = c.load(0, 8);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->source, DataSource::kDram);
}

TEST(CacheModelTest, ResetForgetsEverything) {
  CacheModel c(tiny());
  c.load(0, 8);
  c.reset();
  EXPECT_TRUE(c.load(0, 8).has_value());
}

TEST(CacheModelTest, StoresAllocateButAreNotLoads) {
  CacheModel c(tiny());
  EXPECT_EQ(c.access(0x200, 8, true).level, Level::kDram);
  EXPECT_FALSE(c.load(0x200, 8).has_value());
}

TEST(CacheGeometryTest, ValidationNamesTheProblem) {
  EXPECT_TRUE(validate(tiny()).ok());
  Geometry g = tiny();
  g.line_size = 48;
  EXPECT_EQ(validate(g).reason(), "cache line size must be a power of two >= 8");
  g = tiny();
  g.l1d.size_bytes = 3 * 2 * 64;
  EXPECT_EQ(validate(g).reason(), "L1D size must be ways x line size x a power of two");
  g = tiny();
  g.l2.ways = 0;
  EXPECT_EQ(validate(g).reason(), "L2 must have at least one way");
  g = tiny();
  g.dram_latency_cycles = 10;
  EXPECT_EQ(validate(g).reason(), "cache latencies must not decrease from L1D to DRAM");
}

// A snapshot's cache section with a recomputed checksum is no proof of anything: each level's
// loaded geometry must be the profile's, and its arrays must have sets x ways entries (a larger
// `sets` would index past the tags; 0 would divide by zero).
std::vector<std::byte> crafted_levels(uint32_t sets, uint32_t ways, size_t entries) {
  pmu::StateWriter w;
  for (int level = 0; level < 3; ++level)
    w(sets, ways, std::vector<uint64_t>(entries, ~0ull), std::vector<uint64_t>(entries, 0),
      uint64_t{0});
  return w.take();
}

TEST(CacheModelTest, LoadedStateMustHaveTheProfilesGeometry) {
  CacheModel c(tiny());
  pmu::StateWriter good;
  c.archive(good);
  CacheModel copy(tiny());
  pmu::StateReader r(good.bytes());
  copy.archive(r);  // the model's own state loads
  for (const auto& [sets, ways, entries] :
       {std::tuple<uint32_t, uint32_t, size_t>{1u << 20, 2, 4},  // more sets than tags
        {0, 2, 0},                                               // no sets: index % 0
        {2, 2, 3},                                               // 3 tags for 2 x 2
        {2, 4, 8}}) {                                            // ways not the profile's
    const std::vector<std::byte> bytes = crafted_levels(sets, ways, entries);
    pmu::StateReader reader(bytes);
    CacheModel target(tiny());
    EXPECT_THROW(target.archive(reader), pmu::StateFormatError)
        << "sets " << sets << " ways " << ways << " entries " << entries;
  }
  // A level with no tags (cold) but stamps: the arrays must agree.
  pmu::StateWriter w;
  w(uint32_t{2}, uint32_t{2}, std::vector<uint64_t>{}, std::vector<uint64_t>(4, 0), uint64_t{0});
  pmu::StateReader reader(w.bytes());
  CacheModel target(tiny());
  EXPECT_THROW(target.archive(reader), pmu::StateFormatError);
}

// A desktop-sized hierarchy: 32 KiB L1D, 2 MiB L2, 8 MiB L3 (the shipped profiles' order).
Geometry large() {
  Geometry g;
  g.l1d = {32 << 10, 8, 4};
  g.l2 = {2 << 20, 16, 12};
  g.l3 = {8 << 20, 16, 40};
  return g;
}

size_t state_bytes(CacheModel& c) {
  pmu::StateWriter w;
  c.archive(w);
  return w.bytes().size();
}

// Issue 21: a level's arrays exist from its first fill on, so a VM that never stepped an access
// pays neither their memory nor their snapshot bytes; a reset gives them back.
TEST(CacheModelTest, LevelsNothingReachedCostNoStateAndBehaveCold) {
  CacheModel fresh(large());
  const size_t cold = state_bytes(fresh);
  EXPECT_LT(cold, 256u);
  CacheModel touched(large());
  touched.load(0x1000, 8);
  // 8 MiB + 2 MiB + 32 KiB of 64-byte lines, a tag and a stamp each.
  EXPECT_GT(state_bytes(touched), ((8u << 20) + (2u << 20) + (32u << 10)) / 64 * 16);
  touched.reset();
  EXPECT_EQ(state_bytes(touched), cold);

  // Restored from the cold state, a model misses exactly like a fresh one.
  pmu::StateWriter w;
  fresh.archive(w);
  CacheModel restored(large());
  pmu::StateReader r(w.bytes());
  restored.archive(r);
  CacheModel reference(large());
  for (uint64_t i = 0; i < 5000; ++i) {
    const uint64_t address = (i * 0x9E3779B97F4A7C15ull) % (64ull << 20);
    const auto a = restored.load(address, 8), b = reference.load(address, 8);
    ASSERT_EQ(a.has_value(), b.has_value()) << i;
    if (a) {
      EXPECT_EQ(a->latency_cycles, b->latency_cycles) << i;
    }
  }
}

}  // namespace
}  // namespace pmu::cache
