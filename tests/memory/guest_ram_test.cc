// Guest RAM layout: RAM above 3 GiB moves above 4 GiB so the 32-bit MMIO hole (LAPIC, IOAPIC,
// KVM's TSS pages) is never covered by RAM, and every access outside RAM fails instead of
// touching host memory. Large sizes cost nothing here: the mapping is MAP_NORESERVE and only
// the touched pages are faulted in.
#include "vmm/memory/guest_ram.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>

namespace vmm {
namespace {

constexpr uint64_t GiB = 1ull << 30;

TEST(GuestRam, SmallRamIsOneLowRegion) {
  GuestRam ram(64 << 20);
  ASSERT_EQ(ram.regions().size(), 1u);
  EXPECT_EQ(ram.regions()[0].gpa, 0u);
  EXPECT_EQ(ram.regions()[0].size, 64u << 20);
  EXPECT_EQ(ram.low_size(), 64u << 20);
  EXPECT_EQ(ram.high_size(), 0u);
  EXPECT_TRUE(ram.contains((64 << 20) - 8, 8));
  EXPECT_FALSE(ram.contains((64 << 20) - 4, 8));
  EXPECT_FALSE(ram.contains(4 * GiB, 1));
}

TEST(GuestRam, RamAboveThreeGiBMovesAboveFourGiB) {
  GuestRam ram(5 * GiB);
  const auto regions = ram.regions();
  ASSERT_EQ(regions.size(), 2u);
  EXPECT_EQ(regions[0].gpa, 0u);
  EXPECT_EQ(regions[0].size, 3 * GiB);
  EXPECT_EQ(regions[1].gpa, 4 * GiB);
  EXPECT_EQ(regions[1].size, 2 * GiB);
  EXPECT_EQ(regions[1].host, regions[0].host + 3 * GiB);
  EXPECT_EQ(ram.size(), 5 * GiB);
}

// Host and guest addresses agree modulo 2 MiB in both regions, so KVM can map a host huge page
// with one 2 MiB nested-page-table entry; the mapping ends exactly at the end of RAM.
TEST(GuestRam, RegionsAreAlignedForHugePages) {
  for (uint64_t size : {uint64_t{4096}, uint64_t{3} << 20, uint64_t{256} << 20, 5 * GiB}) {
    GuestRam ram(size);
    for (const GuestRam::Region& r : ram.regions())
      EXPECT_EQ((reinterpret_cast<uintptr_t>(r.host) - r.gpa) % (2u << 20), 0u) << size;
    ram.host(size <= 3 * GiB ? size - 1 : 4 * GiB + (size - 3 * GiB) - 1, 1)[0] = std::byte{1};
  }
}

TEST(GuestRam, TheHoleIsNotRam) {
  GuestRam ram(5 * GiB);
  EXPECT_FALSE(ram.contains(0xFEE00000, 4));  // LAPIC
  EXPECT_FALSE(ram.contains(0xFEC00000, 4));  // IOAPIC
  EXPECT_FALSE(ram.contains(0xFFFBD000, 1));  // KVM's TSS pages
  EXPECT_FALSE(ram.contains(3 * GiB, 1));
  EXPECT_TRUE(ram.contains(3 * GiB - 8, 8));
  EXPECT_FALSE(ram.contains(3 * GiB - 4, 8));  // spans into the hole
  EXPECT_FALSE(ram.contains(4 * GiB - 4, 8));  // spans out of the hole
  EXPECT_TRUE(ram.contains(4 * GiB, 8));
  EXPECT_TRUE(ram.contains(6 * GiB - 8, 8));
  EXPECT_FALSE(ram.contains(6 * GiB - 4, 8));     // past the end
  EXPECT_FALSE(ram.contains(UINT64_MAX - 3, 8));  // wraps
}

TEST(GuestRam, HighAddressesReachTheirOwnBytes) {
  GuestRam ram(4 * GiB);
  ASSERT_TRUE(ram.write_u64(4 * GiB + 0x1000, 0x1122334455667788));
  ASSERT_TRUE(ram.write_u64(0x1000, 0xAABB));
  uint64_t v = 0;
  ASSERT_TRUE(ram.read_u64(4 * GiB + 0x1000, v));
  EXPECT_EQ(v, 0x1122334455667788u);
  EXPECT_EQ(ram.host(4 * GiB + 0x1000, 8), ram.host_base() + 3 * GiB + 0x1000);
  ASSERT_TRUE(ram.read_u64(0x1000, v));
  EXPECT_EQ(v, 0xAABBu);                             // the high write did not alias low RAM
  EXPECT_FALSE(ram.write_u64(3 * GiB + 0x1000, 1));  // the hole takes no writes
}

// Shareable RAM (--stepper emulate maps its frames a second time): a memfd whose offset k is
// the RAM at host_base() + k, so that a second mapping of a frame sees the guest's writes and
// the guest sees the second mapping's. Private RAM has none.
TEST(GuestRam, ShareableRamIsAMemfdAFrameCanBeMappedTwice) {
  GuestRam shared(4 << 20, GuestRam::Backing::kShareable);
  ASSERT_GE(shared.fd(), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(shared.host_base()) % (2 << 20), 0u) << "still aligned";
  ASSERT_TRUE(shared.write_u64(0x3008, 0x1234));
  void* alias = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, shared.fd(), 0x3000);
  ASSERT_NE(alias, MAP_FAILED);
  uint64_t seen = 0;
  std::memcpy(&seen, static_cast<std::byte*>(alias) + 8, 8);
  EXPECT_EQ(seen, 0x1234u);
  const uint64_t other = 0x5678;
  std::memcpy(static_cast<std::byte*>(alias) + 16, &other, 8);
  ASSERT_TRUE(shared.read_u64(0x3010, seen));
  EXPECT_EQ(seen, 0x5678u);
  munmap(alias, 4096);
  EXPECT_EQ(GuestRam(4 << 20).fd(), -1);
}

}  // namespace
}  // namespace vmm
