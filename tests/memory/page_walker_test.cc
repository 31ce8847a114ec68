// The guest page walk behind pmu::GuestMemory: translations of 4 KiB, 2 MiB and 1 GiB pages,
// user/writable permissions ANDed over all levels, and every failure mode (no crash, no access
// outside guest RAM).
#include "vmm/memory/page_walker.h"

#include <gtest/gtest.h>

#include <vector>

namespace vmm {
namespace {

constexpr uint64_t P = 1, W = 2, U = 4, PS = 0x80;

class PageWalkerTest : public ::testing::Test {
 protected:
  PageWalkerTest() : ram_(16 << 20), memory_(ram_) { memory_.set_cr3(kPml4); }

  void set(uint64_t table, unsigned index, uint64_t entry) {
    ASSERT_TRUE(ram_.write_u64(table + index * 8, entry));
  }
  // Maps linear 0x400000 -> physical 0x200000 (4 KiB page) with `leaf_flags`.
  void map_4k(uint64_t leaf_flags, uint64_t upper_flags = P | W | U) {
    set(kPml4, 0, kPdpt | upper_flags);
    set(kPdpt, 0, kPd | upper_flags);
    set(kPd, 2, kPt | upper_flags);  // 0x400000 >> 21 = 2
    set(kPt, 0, 0x200000 | leaf_flags);
    set(kPt, 1, 0x201000 | leaf_flags);
  }

  static constexpr uint64_t kPml4 = 0x1000, kPdpt = 0x2000, kPd = 0x3000, kPt = 0x4000;
  GuestRam ram_;
  PagedGuestMemory memory_;
};

TEST_F(PageWalkerTest, Translates4KiBPage) {
  map_4k(P | W | U);
  auto t = translate(ram_, kPml4, 0x400123);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->gpa, 0x200123u);
  EXPECT_EQ(t->page_size, 4096u);
  EXPECT_TRUE(t->user);
  EXPECT_TRUE(t->writable);
}

TEST_F(PageWalkerTest, Translates2MiBAnd1GiBPages) {
  set(kPml4, 0, kPdpt | P | W | U);
  set(kPdpt, 0, kPd | P | W | U);
  set(kPd, 1, 0x600000 | P | W | U | PS);  // 0x200000..0x3fffff -> 0x600000
  set(kPdpt, 1, 0x0 | P | U | PS);         // 1 GiB at 0x40000000 -> 0, read-only
  auto t2 = translate(ram_, kPml4, 0x212345);
  ASSERT_TRUE(t2.has_value());
  EXPECT_EQ(t2->gpa, 0x612345u);
  EXPECT_EQ(t2->page_size, 2u << 20);
  auto t1 = translate(ram_, kPml4, 0x40001234);
  ASSERT_TRUE(t1.has_value());
  EXPECT_EQ(t1->gpa, 0x1234u);
  EXPECT_EQ(t1->page_size, 1u << 30);
  EXPECT_FALSE(t1->writable);
}

TEST_F(PageWalkerTest, NotPresentAndNonCanonicalFail) {
  map_4k(P | W | U);
  EXPECT_FALSE(translate(ram_, kPml4, 0x402000).has_value());            // PTE 2 empty
  EXPECT_FALSE(translate(ram_, kPml4, 0x0000800000000000).has_value());  // non-canonical
  EXPECT_FALSE(translate(ram_, kPml4, 0x7f0000000000).has_value());      // PML4E empty
}

TEST_F(PageWalkerTest, PermissionsAreAndedOverLevels) {
  map_4k(P | W | U, P | U);  // upper levels read-only
  EXPECT_FALSE(translate(ram_, kPml4, 0x400000)->writable);
  EXPECT_FALSE(memory_.user_writable(0x400000, 8));
  map_4k(P | W | U, P | W);  // upper levels supervisor-only
  EXPECT_FALSE(translate(ram_, kPml4, 0x400000)->user);
  std::vector<std::byte> buf(8);
  EXPECT_FALSE(memory_.read(0x400000, buf));
}

TEST_F(PageWalkerTest, TablesOutsideRamFailWithoutTouchingHostMemory) {
  set(kPml4, 0, 0x7FFFFFF000ull | P | W | U);  // PDPT far beyond 16 MiB of RAM
  EXPECT_FALSE(translate(ram_, kPml4, 0x400000).has_value());
  map_4k(P | W | U);
  set(kPt, 0, 0x7FFFFFF000ull | P | W | U);  // leaf outside RAM
  std::vector<std::byte> buf(8);
  EXPECT_FALSE(memory_.read(0x400000, buf));
  EXPECT_FALSE(memory_.user_writable(0x400000, 8));
}

TEST_F(PageWalkerTest, AccessesSplitAtPageBoundaries) {
  map_4k(P | W | U);
  std::vector<std::byte> data(16);
  for (int i = 0; i < 16; ++i) data[i] = std::byte(i + 1);
  ASSERT_TRUE(memory_.write(0x400FF8, data));  // 8 bytes in each page
  std::vector<std::byte> back(16);
  ASSERT_TRUE(memory_.read(0x400FF8, back));
  EXPECT_EQ(back, data);
  std::vector<std::byte> phys(8);
  ASSERT_TRUE(ram_.read(0x201000, phys));
  EXPECT_EQ(phys[0], std::byte(9));
}

TEST_F(PageWalkerTest, FailedWriteWritesNothing) {
  map_4k(P | W | U);
  set(kPt, 1, 0x201000 | P | U);  // second page read-only
  std::vector<std::byte> data(16, std::byte{0xAB});
  EXPECT_FALSE(memory_.write(0x400FF8, data));
  std::vector<std::byte> first(8);
  ASSERT_TRUE(ram_.read(0x200FF8, first));
  EXPECT_EQ(first, std::vector<std::byte>(8, std::byte{0}));
}

TEST_F(PageWalkerTest, WrappingRangeIsRejected) {
  map_4k(P | W | U);
  EXPECT_FALSE(memory_.user_writable(0xFFFFFFFFFFFFFFF0ull, 0x20));
}

// probe_user_write says why a user write fails, for the lowest failing byte: a #PF the guest can
// resolve (not present: P = 0; present but read-only or supervisor: P = 1), or nothing it can
// (non-canonical, tables or page outside RAM, reserved entry). LWP's #PF trap depends on it.
TEST_F(PageWalkerTest, ProbeUserWriteReportsWhy) {
  using pmu::WriteFault;
  using pmu::WriteProbe;
  auto probe = [&](uint64_t a, uint64_t n) { return memory_.probe_user_write(a, n); };
  auto is = [](WriteProbe p, WriteFault f, uint64_t a) { return p.fault == f && p.address == a; };
  EXPECT_TRUE(is(probe(0x400000, 8), WriteFault::kNotPresent, 0x400000));  // PML4E empty
  map_4k(P | W | U);
  EXPECT_TRUE(is(probe(0x400FF0, 0x20), WriteFault::kNone, 0));
  EXPECT_TRUE(is(probe(0x401FF0, 0x20), WriteFault::kNotPresent, 0x402000));  // PTE 2 empty
  set(kPt, 1, 0x201000 | P | U);  // second page read-only
  EXPECT_TRUE(is(probe(0x400FF0, 0x20), WriteFault::kProtection, 0x401000));
  set(kPt, 1, 0x201000 | P | W);  // second page supervisor-only
  EXPECT_TRUE(is(probe(0x401000, 8), WriteFault::kProtection, 0x401000));
  set(kPt, 1, 0x7FFFFFF000ull | P | W | U);  // page outside RAM
  EXPECT_TRUE(is(probe(0x401000, 8), WriteFault::kUnreachable, 0x401000));
  set(kPd, 2, 0x7FFFFFF000ull | P | W | U);  // page table outside RAM
  EXPECT_TRUE(is(probe(0x400000, 8), WriteFault::kUnreachable, 0x400000));
  EXPECT_TRUE(is(probe(0x0000800000000000, 8), WriteFault::kUnreachable, 0x0000800000000000));
  set(kPml4, 1, kPdpt | P | W | U | PS);  // PS in a PML4E is reserved
  EXPECT_TRUE(is(probe(0x8000000000, 8), WriteFault::kUnreachable, 0x8000000000));
  EXPECT_TRUE(
      is(probe(0xFFFFFFFFFFFFFFF0ull, 0x20), WriteFault::kUnreachable, 0xFFFFFFFFFFFFFFF0ull));
  EXPECT_TRUE(is(probe(0x123, 0), WriteFault::kNone, 0));
}

TEST(GuestRamTest, BoundsChecksRejectEverythingOutside) {
  GuestRam ram(1 << 20);
  std::vector<std::byte> buf(16);
  EXPECT_TRUE(ram.read((1 << 20) - 16, buf));
  EXPECT_FALSE(ram.read((1 << 20) - 15, buf));
  EXPECT_FALSE(ram.write(UINT64_MAX - 4, buf));
  EXPECT_EQ(ram.host(1 << 20, 1), nullptr);
  EXPECT_NE(ram.host(0, 1 << 20), nullptr);
}

TEST(GuestRamTest, RejectsBadSizes) {
  EXPECT_THROW(GuestRam(0), std::runtime_error);
  EXPECT_THROW(GuestRam(4097), std::runtime_error);
}

// The walk that fills a TLB: A in every entry used, D in the one that maps the page on a write.
TEST_F(PageWalkerTest, WalkAndMarkSetsAccessedAndOnWriteDirty) {
  constexpr uint64_t A = 0x20, D = 0x40;
  map_4k(P | W | U);
  auto entry = [&](uint64_t table, unsigned index) {
    uint64_t v = 0;
    EXPECT_TRUE(ram_.read_u64(table + index * 8, v));
    return v;
  };
  ASSERT_TRUE(walk_and_mark(ram_, kPml4, 0x400010, /*write=*/false));
  EXPECT_EQ(entry(kPml4, 0), kPdpt | P | W | U | A);
  EXPECT_EQ(entry(kPdpt, 0), kPd | P | W | U | A);
  EXPECT_EQ(entry(kPd, 2), kPt | P | W | U | A);
  EXPECT_EQ(entry(kPt, 0), 0x200000 | P | W | U | A);
  EXPECT_EQ(entry(kPt, 1), 0x201000 | P | W | U) << "the other page is untouched";
  const auto t = walk_and_mark(ram_, kPml4, 0x400010, /*write=*/true);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->gpa, 0x200010u);
  EXPECT_EQ(entry(kPt, 0), 0x200000 | P | W | U | A | D);
  EXPECT_EQ(entry(kPd, 2), kPt | P | W | U | A) << "D only where the page is mapped";
  // A 2 MiB page: its PDE is the leaf and takes D.
  set(kPd, 4, 0x600000 | P | W | U | PS);
  ASSERT_TRUE(walk_and_mark(ram_, kPml4, 0x800123, /*write=*/true));
  EXPECT_EQ(entry(kPd, 4), 0x600000 | P | W | U | PS | A | D);
  // Nothing present: nothing marked.
  set(kPd, 6, 0);
  EXPECT_FALSE(walk_and_mark(ram_, kPml4, 0xC00000, /*write=*/true));
}

}  // namespace
}  // namespace vmm
