// The emulator's shadow page tables (vmm/emulate/shadow_page_tables.h), read back as a CPU walks
// them: 4 levels from the PML4 at kBase, every upper entry present/writable/user, the leaf
// present, writable as asked, supervisor for code and user for data; clear() and reset() take pages
// away; the pool runs out without writing past it.
#include "vmm/emulate/shadow_page_tables.h"

#include <gtest/gtest.h>

#include <cstring>
#include <optional>

namespace vmm {
namespace {

// The leaf entry a walk of `t` finds for `linear` (nullopt: an entry on the way is absent).
std::optional<uint64_t> leaf(ShadowPageTables& t, uint64_t linear) {
  const auto* bytes = t.bytes();
  uint64_t table = ShadowPageTables::cr3();
  for (int shift = 39; shift >= 12; shift -= 9) {
    uint64_t e = 0;
    std::memcpy(&e, bytes + (table - ShadowPageTables::kBase) + ((linear >> shift) & 511) * 8, 8);
    if (shift == 12) return e;
    if (!(e & 1)) return std::nullopt;
    EXPECT_EQ(e & 7, 7u) << "upper entries: present, writable, user";
    table = e & 0x000FFFFFFFFFF000ull;
    EXPECT_GE(table, ShadowPageTables::kBase);
    EXPECT_LT(table, ShadowPageTables::kBase + ShadowPageTables::size());
  }
  return std::nullopt;
}

TEST(ShadowPageTables, PagesArePresentUserAndWritableAsAsked) {
  ShadowPageTables t;
  EXPECT_FALSE(leaf(t, 0x400000).has_value());
  ASSERT_TRUE(t.set(0x400000, false, true));
  ASSERT_TRUE(t.set(0x401000, true, false));
  ASSERT_TRUE(t.set(0x7ffffffff000, true, false));
  EXPECT_EQ(leaf(t, 0x400000), 0x1u) << "code: present, supervisor (SMEP lets CPL 0 fetch it), "
                                        "read-only; no address (Unicorn ignores it)";
  EXPECT_EQ(leaf(t, 0x401000), 0x7u) << "data: present, writable, user (never fetched)";
  EXPECT_EQ(leaf(t, 0x7ffffffff000), 0x7u);
  EXPECT_EQ(leaf(t, 0x402000), 0u) << "a neighbour in the same table: absent";
  t.clear(0x401000);
  EXPECT_EQ(leaf(t, 0x401000), 0u);
  EXPECT_EQ(leaf(t, 0x400000), 0x1u);
  t.reset();
  EXPECT_FALSE(leaf(t, 0x400000).has_value());
}

TEST(ShadowPageTables, KernelAddressesAndAnExhaustedPoolAreRefused) {
  ShadowPageTables t;
  EXPECT_FALSE(t.set(0xffff800000000000, false, false));
  EXPECT_FALSE(t.set(uint64_t{1} << 47, false, false));
  // Each page 1 GiB apart needs a PDPT entry's PD and a PT: 2 pages (plus PDPTs per 512 GiB).
  size_t placed = 0;
  while (t.set(placed * (uint64_t{1} << 30), true, false)) ++placed;
  EXPECT_GT(placed, (ShadowPageTables::kPages - 2) / 3);
  EXPECT_LT(placed, ShadowPageTables::kPages / 2);
  EXPECT_EQ(leaf(t, 0), 0x7u) << "what was placed stays";
  t.reset();
  EXPECT_TRUE(t.set(placed * (uint64_t{1} << 30), true, false));
}

}  // namespace
}  // namespace vmm
