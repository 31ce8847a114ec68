// The Linux 64-bit boot protocol as pmuvm implements it (vmm/boot/linux_boot.h), checked field by
// field against Documentation/x86/boot.rst and zero-page.rst on synthetic bzImages: every header
// check with its message, the zero page, the e820 map, the command line, the initrd placement and
// the MP table Linux's mpparse.c reads.
#include "vmm/boot/linux_boot.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/support/bzimage_builder.h"
#include "vmm/boot/mp_table.h"

namespace vmm {
namespace {

using pmu::testing::put_le;

template <typename T>
T get(const GuestRam& ram, uint64_t gpa) {
  T v{};
  EXPECT_TRUE(ram.read(gpa, std::as_writable_bytes(std::span<T>(&v, 1))));
  return v;
}

// A bzImage with protocol 2.15, 4 setup sectors + boot sector, and `payload` bytes of kernel.
std::vector<uint8_t> fake_bzimage(size_t payload = 64 * 1024) {
  return pmu::testing::make_bzimage(0x020F, payload);
}

BzImage parse_ok(const std::vector<uint8_t>& file) {
  auto r = parse_bzimage(file, "bz");
  if (auto* e = r.error_message()) ADD_FAILURE() << *e;
  return r.value();
}

std::string parse_error(const std::vector<uint8_t>& file) {
  auto r = parse_bzimage(file, "bz");
  return !r.ok() ? r.error().message : "(parsed)";
}

TEST(LinuxBootTest, ParsesTheSetupHeader) {
  const BzImage i = parse_ok(fake_bzimage());
  EXPECT_EQ(i.protocol, 0x020F);
  EXPECT_EQ(i.setup_bytes, 5u * 512);
  EXPECT_EQ(i.load_address, 0x1000000u);
  EXPECT_EQ(i.init_size, 0x800000u);
  EXPECT_EQ(i.cmdline_size, 2047u);
  EXPECT_TRUE(has_linux_boot_header(fake_bzimage()));
}

TEST(LinuxBootTest, SetupSectsZeroMeansFour) {
  std::vector<uint8_t> b = fake_bzimage();
  b[0x1F1] = 0;
  EXPECT_EQ(parse_ok(b).setup_bytes, 5u * 512);
}

TEST(LinuxBootTest, RefusesWhatCannotBoot) {
  std::vector<uint8_t> elf(4096, 0);
  std::memcpy(elf.data(),
              "\x7f"
              "ELF",
              4);
  EXPECT_FALSE(has_linux_boot_header(elf));
  EXPECT_NE(parse_error(elf).find("not a Linux bzImage"), std::string::npos);
  EXPECT_NE(parse_error(std::vector<uint8_t>(100, 0)).find("not a Linux bzImage"),
            std::string::npos);

  std::vector<uint8_t> b = fake_bzimage();
  put_le<uint16_t>(b, 0x1FE, 0);
  EXPECT_NE(parse_error(b).find("boot flag"), std::string::npos);

  b = fake_bzimage();
  put_le<uint16_t>(b, 0x206, 0x020B);
  EXPECT_NE(parse_error(b).find("boot protocol 2.11 is too old"), std::string::npos);

  b = fake_bzimage();
  put_le<uint16_t>(b, 0x236, 0x0002);
  EXPECT_NE(parse_error(b).find("no 64-bit entry point"), std::string::npos);

  b = fake_bzimage();
  b[0x211] = 0;
  EXPECT_NE(parse_error(b).find("zImage"), std::string::npos);

  b = fake_bzimage(0);  // setup code only
  EXPECT_NE(parse_error(b).find("no kernel after"), std::string::npos);

  b = fake_bzimage();
  put_le<uint64_t>(b, 0x258, 0x80000);
  EXPECT_NE(parse_error(b).find("below 1 MiB"), std::string::npos);
}

TEST(LinuxBootTest, WritesKernelZeroPageCommandLineAndE820) {
  GuestRam ram(256 << 20);
  const std::vector<uint8_t> file = fake_bzimage();
  const BzImage image = parse_ok(file);
  LinuxBootOptions o;
  o.cmdline = "console=ttyS0 -- init arg";
  auto r = load_linux(ram, file, image, "bz", o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const LinuxBoot boot = r.value();
  EXPECT_EQ(boot.entry, 0x1000200u);  // 64-bit entry: load address + 0x200
  EXPECT_EQ(boot.zero_page, linux_layout::kZeroPage);
  // The protected-mode kernel, byte for byte, at pref_address.
  std::vector<uint8_t> loaded(file.size() - 5 * 512);
  ASSERT_TRUE(ram.read(0x1000000, std::as_writable_bytes(std::span<uint8_t>(loaded))));
  EXPECT_TRUE(std::equal(loaded.begin(), loaded.end(), file.begin() + 5 * 512));
  // The setup header copied into the zero page, then the loader's fields.
  const uint64_t zp = boot.zero_page;
  EXPECT_EQ(get<uint32_t>(ram, zp + 0x202), 0x53726448u);  // "HdrS"
  EXPECT_EQ(get<uint16_t>(ram, zp + 0x206), 0x020F);
  EXPECT_EQ(get<uint64_t>(ram, zp + 0x258), 0x1000000u);
  EXPECT_EQ(get<uint8_t>(ram, zp + 0x210), 0xFF);  // type_of_loader: undefined
  EXPECT_EQ(get<uint8_t>(ram, zp + 0x211), 0x81);  // LOADED_HIGH | CAN_USE_HEAP
  EXPECT_EQ(get<uint32_t>(ram, zp + 0x228), linux_layout::kCommandLine);
  EXPECT_EQ(get<uint32_t>(ram, zp + 0x218), 0u);  // no initrd
  EXPECT_EQ(get<uint32_t>(ram, zp + 0x21C), 0u);
  char cmdline[64] = {};
  ASSERT_TRUE(ram.read(linux_layout::kCommandLine, std::as_writable_bytes(std::span(cmdline))));
  EXPECT_STREQ(cmdline, "console=ttyS0 -- init arg");
  // e820: base memory (without the MP table's KiB), the reserved KiB, RAM from 1 MiB on.
  ASSERT_EQ(get<uint8_t>(ram, zp + 0x1E8), 3);
  struct Entry {
    uint64_t addr, size;
    uint32_t type;
  };
  const Entry want[] = {
      {0, 0x9FC00, 1}, {0x9FC00, 0x400, 2}, {0x100000, (256u << 20) - 0x100000, 1}};
  for (size_t i = 0; i < 3; ++i) {
    const uint64_t e = zp + 0x2D0 + i * 20;
    EXPECT_EQ(get<uint64_t>(ram, e), want[i].addr) << i;
    EXPECT_EQ(get<uint64_t>(ram, e + 8), want[i].size) << i;
    EXPECT_EQ(get<uint32_t>(ram, e + 16), want[i].type) << i;
  }
}

TEST(LinuxBootTest, RamAboveTheHoleIsAFourthE820Entry) {
  GuestRam ram(4ull << 30);  // 3 GiB low + 1 GiB above 4 GiB
  const std::vector<uint8_t> file = fake_bzimage();
  auto r = load_linux(ram, file, parse_ok(file), "bz", LinuxBootOptions{});
  ASSERT_TRUE(r.ok());
  const uint64_t zp = linux_layout::kZeroPage;
  ASSERT_EQ(get<uint8_t>(ram, zp + 0x1E8), 4);
  EXPECT_EQ(get<uint64_t>(ram, zp + 0x2D0 + 2 * 20 + 8), 0xC0000000u - 0x100000);
  EXPECT_EQ(get<uint64_t>(ram, zp + 0x2D0 + 3 * 20), 0x100000000u);
  EXPECT_EQ(get<uint64_t>(ram, zp + 0x2D0 + 3 * 20 + 8), 1ull << 30);
}

TEST(LinuxBootTest, InitrdGoesToTheTopOfRamPageAligned) {
  GuestRam ram(64 << 20);
  const std::vector<uint8_t> file = fake_bzimage();
  std::vector<uint8_t> initrd(10000);
  for (size_t i = 0; i < initrd.size(); ++i) initrd[i] = static_cast<uint8_t>(i ^ 0x5A);
  LinuxBootOptions o;
  o.initrd = initrd;
  o.initrd_name = "rd";
  auto r = load_linux(ram, file, parse_ok(file), "bz", o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const LinuxBoot boot = r.value();
  EXPECT_EQ(boot.initrd, (64u << 20) - 12288);  // 10000 bytes → three pages below the top
  EXPECT_EQ(boot.initrd_size, 10000u);
  EXPECT_EQ(get<uint32_t>(ram, linux_layout::kZeroPage + 0x218), boot.initrd);
  EXPECT_EQ(get<uint32_t>(ram, linux_layout::kZeroPage + 0x21C), 10000u);
  std::vector<uint8_t> back(initrd.size());
  ASSERT_TRUE(ram.read(boot.initrd, std::as_writable_bytes(std::span<uint8_t>(back))));
  EXPECT_EQ(back, initrd);
}

TEST(LinuxBootTest, InitrdBelowInitrdAddrMax) {
  GuestRam ram(64 << 20);
  std::vector<uint8_t> file = fake_bzimage();
  put_le<uint32_t>(file, 0x22C, (32u << 20) - 1);
  std::vector<uint8_t> initrd(4096, 1);
  LinuxBootOptions o;
  o.initrd = initrd;
  auto r = load_linux(ram, file, parse_ok(file), "bz", o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().initrd, (32u << 20) - 4096);
}

TEST(LinuxBootTest, RefusesWhatDoesNotFitAndWritesNothing) {
  const std::vector<uint8_t> file = fake_bzimage();
  const BzImage image = parse_ok(file);
  {
    GuestRam ram(16 << 20);  // kernel at 16 MiB + 8 MiB init_size
    auto r = load_linux(ram, file, image, "bz", LinuxBootOptions{});
    ASSERT_TRUE(!r.ok());
    EXPECT_NE(r.error().message.find("raise --mem"), std::string::npos);
    EXPECT_EQ(get<uint32_t>(ram, linux_layout::kZeroPage + 0x202), 0u);
  }
  {
    GuestRam ram(32 << 20);
    std::vector<uint8_t> initrd(9u << 20);  // 24 MiB kernel end + 9 MiB > 32 MiB
    LinuxBootOptions o;
    o.initrd = initrd;
    o.initrd_name = "big.cpio";
    auto r = load_linux(ram, file, image, "bz", o);
    ASSERT_TRUE(!r.ok());
    EXPECT_NE(r.error().message.find("big.cpio: the initrd (9 MiB) does not fit"),
              std::string::npos)
        << r.error().message;
    EXPECT_NE(r.error().message.find("at least 34 MiB"), std::string::npos) << r.error().message;
    EXPECT_EQ(get<uint32_t>(ram, linux_layout::kZeroPage + 0x202), 0u);
  }
  {
    GuestRam ram(64 << 20);
    LinuxBootOptions o;
    o.cmdline = std::string(2048, 'x');  // cmdline_size 2047
    auto r = load_linux(ram, file, image, "bz", o);
    ASSERT_TRUE(!r.ok());
    EXPECT_NE(r.error().message.find("at most 2047"), std::string::npos);
  }
}

// Linux's mpparse.c: "_MP_" with a checksum over 16 bytes pointing at "PCMP" whose checksum
// covers its base length; one processor entry per vCPU, the first the BSP; the ISA bus; the
// IOAPIC; 16 I/O interrupt entries with pin = IRQ; LINT0 ExtINT and LINT1 NMI.
TEST(MpTableTest, IsWhatMpparseReads) {
  GuestRam ram(4 << 20);
  const uint64_t at = linux_layout::kMpTable;
  ASSERT_TRUE(write_mp_table(ram, at, 0x400, MpTableOptions{3, 0xF43, 0x201}));
  std::vector<uint8_t> t(mp_table_size(3));
  ASSERT_TRUE(ram.read(at, std::as_writable_bytes(std::span<uint8_t>(t))));
  auto sum = [&](size_t from, size_t n) {
    uint8_t s = 0;
    for (size_t i = from; i < from + n; ++i) s = static_cast<uint8_t>(s + t[i]);
    return s;
  };
  EXPECT_EQ(std::memcmp(t.data(), "_MP_", 4), 0);
  EXPECT_EQ(get<uint32_t>(ram, at + 4), at + 16);
  EXPECT_EQ(t[8], 1);  // 16 bytes
  EXPECT_EQ(t[9], 4);  // spec 1.4
  EXPECT_EQ(sum(0, 16), 0);
  EXPECT_EQ(t[11], 0);  // a configuration table, no default configuration
  const size_t c = 16;
  EXPECT_EQ(std::memcmp(&t[c], "PCMP", 4), 0);
  const uint16_t length = get<uint16_t>(ram, at + c + 4);
  EXPECT_EQ(length, t.size() - 16);
  EXPECT_EQ(sum(c, length), 0);
  EXPECT_EQ(get<uint16_t>(ram, at + c + 34), 3 + 1 + 1 + 16 + 2);  // entry count
  EXPECT_EQ(get<uint32_t>(ram, at + c + 36), 0xFEE00000u);
  size_t e = c + 44;
  for (uint8_t cpu = 0; cpu < 3; ++cpu, e += 20) {
    EXPECT_EQ(t[e], 0);  // processor
    EXPECT_EQ(t[e + 1], cpu);
    EXPECT_EQ(t[e + 3], cpu == 0 ? 3 : 1);  // enabled, BSP
    EXPECT_EQ(get<uint32_t>(ram, at + e + 4), 0xF43u);
  }
  EXPECT_EQ(t[e], 1);
  EXPECT_EQ(std::memcmp(&t[e + 2], "ISA   ", 6), 0);
  e += 8;
  EXPECT_EQ(t[e], 2);      // IOAPIC
  EXPECT_EQ(t[e + 1], 3);  // ID after the CPUs'
  EXPECT_EQ(t[e + 3], 1);
  EXPECT_EQ(get<uint32_t>(ram, at + e + 4), 0xFEC00000u);
  e += 8;
  for (uint8_t irq = 0; irq < 16; ++irq, e += 8) {
    EXPECT_EQ(t[e], 3);
    EXPECT_EQ(t[e + 1], 0);  // vectored INT
    EXPECT_EQ(t[e + 5], irq);
    EXPECT_EQ(t[e + 6], 3);
    EXPECT_EQ(t[e + 7], irq);
  }
  EXPECT_EQ(t[e], 4);
  EXPECT_EQ(t[e + 1], 3);  // ExtINT
  EXPECT_EQ(t[e + 7], 0);  // LINT0
  EXPECT_EQ(t[e + 8], 4);
  EXPECT_EQ(t[e + 9], 1);   // NMI
  EXPECT_EQ(t[e + 15], 1);  // LINT1
  EXPECT_EQ(e + 16, t.size());
}

TEST(MpTableTest, RefusesWhatDoesNotFit) {
  GuestRam ram(4 << 20);
  EXPECT_FALSE(write_mp_table(ram, linux_layout::kMpTable, 100, MpTableOptions{1, 0, 0}));
  EXPECT_FALSE(write_mp_table(ram, linux_layout::kMpTable, 0x10000, MpTableOptions{255, 0, 0}));
  EXPECT_FALSE(write_mp_table(ram, linux_layout::kMpTable + 8, 0x400, MpTableOptions{1, 0, 0}));
  EXPECT_TRUE(write_mp_table(ram, linux_layout::kMpTable, 0x400, MpTableOptions{16, 0, 0}));
}

}  // namespace
}  // namespace vmm
