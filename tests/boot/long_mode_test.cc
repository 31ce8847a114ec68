// The 64-bit boot state: the identity map is what the page walker sees, descriptors have the
// bits long mode requires, and SYSCALL/SYSRET selector arithmetic works with this GDT.
#include "vmm/boot/long_mode.h"

#include <gtest/gtest.h>

#include "vmm/boot/guest_layout.h"
#include "vmm/memory/page_walker.h"

namespace vmm {
namespace {

TEST(LongModeTest, IdentityMapsAllOfRamWithSupervisorPages) {
  GuestRam ram(64 << 20);
  LongModeState s = setup_long_mode(ram);
  for (uint64_t a : {0x0ull, 0x1000ull, 0x100000ull, 0x2345678ull, (64ull << 20) - 1}) {
    auto t = translate(ram, s.cr3, a);
    ASSERT_TRUE(t.has_value()) << std::hex << a;
    EXPECT_EQ(t->gpa, a);
    EXPECT_FALSE(t->user);  // the kernel maps user memory itself
    EXPECT_TRUE(t->writable);
  }
  EXPECT_FALSE(translate(ram, s.cr3, 64ull << 20).has_value());
}

// The boot identity map covers the RAM below the 32-bit MMIO hole (GuestRam): not the hole, not
// the RAM above 4 GiB (the bundled kernel maps what it needs itself).
TEST(LongModeTest, LargeRamMapsTheRamBelowTheHole) {
  GuestRam ram(5ull << 30);  // MAP_NORESERVE: costs nothing until touched
  LongModeState s = setup_long_mode(ram);
  EXPECT_TRUE(translate(ram, s.cr3, (3ull << 30) - 1).has_value());
  EXPECT_FALSE(translate(ram, s.cr3, 3ull << 30).has_value());
  EXPECT_FALSE(translate(ram, s.cr3, 4ull << 30).has_value());
}

TEST(LongModeTest, DescriptorsHaveLongModeBits) {
  GuestRam ram(8 << 20);
  setup_long_mode(ram);
  uint64_t kcode = 0, ucode = 0, udata = 0;
  ram.read_u64(layout::kGdt + layout::kKernelCs, kcode);
  ram.read_u64(layout::kGdt + (layout::kUserCs & ~3), ucode);
  ram.read_u64(layout::kGdt + (layout::kUserDs & ~3), udata);
  EXPECT_EQ((kcode >> 53) & 1, 1u);  // L
  EXPECT_EQ((kcode >> 54) & 1, 0u);  // D must be 0 with L
  EXPECT_EQ((kcode >> 45) & 3, 0u);  // DPL 0
  EXPECT_EQ((ucode >> 45) & 3, 3u);  // DPL 3
  EXPECT_EQ((ucode >> 53) & 1, 1u);
  EXPECT_EQ((udata >> 45) & 3, 3u);
  // SYSRET to 64-bit: CS = STAR[63:48] + 16, SS = STAR[63:48] + 8, with STAR[63:48] = 0x10.
  EXPECT_EQ(0x10 + 16, layout::kUserCs & ~3);
  EXPECT_EQ(0x10 + 8, layout::kUserDs & ~3);
}

TEST(LongModeTest, ControlRegistersEnableLongModeAndPaging) {
  GuestRam ram(8 << 20);
  LongModeState s = setup_long_mode(ram);
  EXPECT_EQ(s.cr0 & 0x80000001, 0x80000001u);  // PG | PE
  EXPECT_EQ(s.cr4 & 0x20, 0x20u);              // PAE
  EXPECT_EQ(s.efer & 0x500, 0x500u);           // LME | LMA
  EXPECT_EQ(s.cs.l, 1);
  EXPECT_EQ(s.cs.db, 0);
  EXPECT_EQ(s.tr.type, 0xB);
}

TEST(LongModeTest, RejectsTooLittleRam) {
  GuestRam ram(2 << 20);
  EXPECT_THROW(setup_long_mode(ram), std::runtime_error);
}

}  // namespace
}  // namespace vmm
