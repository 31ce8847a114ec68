// Loading the kernel and programs into guest RAM: exact boot information, segment placement
// with zero-filled BSS, arguments, and every rejected input (RAM untouched).
#include "vmm/boot/guest_loader.h"

#include <gtest/gtest.h>

#include <cstring>

#include "guest/abi/pmuvm_abi.h"
#include "tests/support/elf_builder.h"

namespace vmm {
namespace {

using pmu::testing::make_elf;

ElfImage elf(const std::vector<pmu::testing::ElfSegmentSpec>& segs, uint64_t entry) {
  auto r = parse_elf(make_elf(segs, entry), "x");
  return r.value();
}

ElfImage kernel() { return elf({{0x100000, 0x3000, 0x1800, PF_R | PF_X | PF_W}}, 0x100000); }

GuestProgram program(uint64_t vaddr = 0x400000, std::vector<std::string> args = {}) {
  return GuestProgram{
      "/tmp/prog.elf",
      elf({{vaddr + 0x10, 0x1000, 0x100, PF_R | PF_X}, {vaddr + 0x2000, 0x2000, 0x10, PF_R | PF_W}},
          vaddr + 0x10),
      std::move(args)};
}

pmuvm_boot_info read_info(GuestRam& ram) {
  pmuvm_boot_info info;
  std::memcpy(&info, ram.host(PMUVM_BOOT_INFO_ADDR, sizeof info), sizeof info);
  return info;
}

TEST(GuestLoaderTest, PlacesKernelAndProgramsAndDescribesThem) {
  GuestRam ram(16 << 20);
  std::vector<GuestProgram> programs = {program(0x400000, {"one", "two"})};
  auto r = load_guest(ram, kernel(), "kernel", programs, BootParameters{2, 0x3, 250});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const LoadedGuest& g = r.value();
  EXPECT_EQ(g.kernel_entry, 0x100000u);
  const pmuvm_boot_info info = read_info(ram);
  EXPECT_EQ(info.magic, PMUVM_BOOT_MAGIC);
  EXPECT_EQ(info.vcpu_count, 2u);
  EXPECT_EQ(info.pv_features, 0x3u);
  EXPECT_EQ(info.timer_hz, 250u);
  EXPECT_EQ(info.ram_size, 16u << 20);
  ASSERT_EQ(info.program_count, 1u);
  const pmuvm_program& p = info.programs[0];
  EXPECT_STREQ(p.name, "prog.elf");
  EXPECT_EQ(p.entry, 0x400010u);
  ASSERT_EQ(p.segment_count, 2u);
  // Kernel ends at 0x103000: the first segment's page goes there, vaddr offset kept.
  EXPECT_EQ(p.segments[0].paddr, 0x103010u);
  EXPECT_EQ(p.segments[0].flags, PMUVM_SEG_R | PMUVM_SEG_X);
  EXPECT_EQ(p.segments[1].paddr, 0x105000u);
  EXPECT_EQ(p.segments[1].flags, PMUVM_SEG_R | PMUVM_SEG_W);
  EXPECT_EQ(*ram.host(0x103010, 1), std::byte{0xCC});
  EXPECT_EQ(*ram.host(0x103010 + 0x100, 1), std::byte{0});  // BSS zero
  EXPECT_EQ(p.argc, 3u);
  EXPECT_EQ(
      std::string(reinterpret_cast<const char*>(ram.host(p.args_paddr, p.args_size)), p.args_size),
      std::string("prog.elf\0one\0two\0", 17));
  EXPECT_EQ(info.free_phys_start, g.free_phys_start);
  EXPECT_EQ(g.free_phys_start % 4096, 0u);
  // Kernel bytes and zeroed kernel BSS.
  EXPECT_EQ(*ram.host(0x100000, 1), std::byte{0xCC});
  EXPECT_EQ(*ram.host(0x101800, 1), std::byte{0});
}

TEST(GuestLoaderTest, ProgramOverlappingKernelIsRejected) {
  GuestRam ram(16 << 20);
  auto r = load_guest(ram, kernel(), "kernel", {program(0x101000)}, {});
  ASSERT_TRUE(!r.ok());
  EXPECT_EQ(r.error().message,
            "/tmp/prog.elf: segment 0x101010-0x102010 overlaps the kernel (0x100000-0x103000)");
  EXPECT_EQ(*ram.host(0x100000, 1), std::byte{0}) << "nothing was written";
}

TEST(GuestLoaderTest, TooLittleRamNamesTheMinimum) {
  GuestRam ram(2 << 20);
  auto r = load_guest(ram, kernel(), "kernel", {program()}, {});
  ASSERT_TRUE(!r.ok());
  EXPECT_EQ(r.error().message,
            "--mem 2 MiB is too small for kernel and 1 program(s): need at least 4 MiB");
}

TEST(GuestLoaderTest, KernelBelowOneMegabyteIsRejected) {
  GuestRam ram(16 << 20);
  auto r = load_guest(ram, elf({{0x8000, 0x1000, 0x10, PF_R | PF_X}}, 0x8000), "k.elf", {}, {});
  EXPECT_EQ(r.error().message, "k.elf: segment at physical 0x8000 is below 1 MiB");
}

// A crafted kernel image (issue 20): a physical range that wraps, or ends past RAM although its
// end rounded down fits, is refused before anything is allocated or written; so is a program
// segment in the kernel's half of the address space (page rounding of its end would wrap).
TEST(GuestLoaderTest, KernelSegmentsOutsideRamAreRejected) {
  GuestRam ram(16 << 20);
  // paddr + memsz wraps to 0x1000: the RAM check once passed and the BSS fill asked for 2^64 bytes.
  auto wraps =
      load_guest(ram, elf({{0x100000, 0x1000, 0x10, PF_R | PF_X, 0xFFFFFFFFFFFFF000}}, 0x100000),
                 "k.elf", {}, {});
  ASSERT_TRUE(!wraps.ok());
  EXPECT_EQ(wraps.error().message,
            "k.elf: segment at physical 0xfffffffffffff000 (0x1000 bytes) is not inside guest RAM "
            "(0x100000-0x1000000)");
  auto past = load_guest(ram, elf({{0x100000, 0x1000, 0x10, PF_R | PF_X, 0x1000000}}, 0x100000),
                         "k.elf", {}, {});
  ASSERT_TRUE(!past.ok());
  EXPECT_EQ(past.error().message,
            "k.elf: segment at physical 0x1000000 (0x1000 bytes) is not inside guest RAM "
            "(0x100000-0x1000000)");
}

TEST(GuestLoaderTest, ProgramSegmentsInTheKernelHalfAreRejected) {
  GuestRam ram(16 << 20);
  GuestProgram p{"/tmp/high.elf",
                 elf({{0xFFFFFFFFFFFFF010, 0xFE0, 0x10, PF_R | PF_X}}, 0xFFFFFFFFFFFFF010),
                 {}};
  auto r = load_guest(ram, kernel(), "kernel", {p}, {});
  ASSERT_TRUE(!r.ok());
  EXPECT_EQ(r.error().message,
            "/tmp/high.elf: segment 0xfffffffffffff010-0xfffffffffffffff0 is not in user space "
            "(below 0x800000000000)");
}

TEST(GuestLoaderTest, TooManyProgramsIsRejected) {
  GuestRam ram(64 << 20);
  std::vector<GuestProgram> many(PMUVM_MAX_PROGRAMS + 1, program());
  auto r = load_guest(ram, kernel(), "kernel", many, {});
  EXPECT_EQ(r.error().message, "too many programs: 17 (at most 16)");
}

}  // namespace
}  // namespace vmm
