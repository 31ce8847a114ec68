// ELF64 parsing: a good static executable loads; every malformed file is a one-line error that
// names the file.
#include "vmm/boot/elf_image.h"

#include <elf.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <variant>

#include "tests/support/elf_builder.h"

namespace vmm {
namespace {

using Seg = pmu::testing::ElfSegmentSpec;
using pmu::testing::make_elf;

std::string error_of(Result<ElfImage> r) { return !r.ok() ? r.error().message : ""; }

TEST(ElfImageTest, ParsesStaticExecutable) {
  auto r = parse_elf(
      make_elf({{0x400000, 0x2000, 0x100, PF_R | PF_X}, {0x600000, 0x1000, 0x10, PF_R | PF_W}},
               0x400010),
      "prog");
  ASSERT_TRUE(r.ok()) << error_of(r);
  const ElfImage& img = r.value();
  EXPECT_EQ(img.entry, 0x400010u);
  ASSERT_EQ(img.segments.size(), 2u);
  EXPECT_TRUE(img.segments[0].executable);
  EXPECT_TRUE(img.segments[1].writable);
  EXPECT_EQ(img.lowest_vaddr(), 0x400000u);
  EXPECT_EQ(img.highest_vaddr_end(), 0x601000u);
  EXPECT_EQ(img.contents(img.segments[0]).size(), 0x100u);
  EXPECT_EQ(img.contents(img.segments[0])[0], std::byte{0xCC});
}

TEST(ElfImageTest, RejectsNonElf) {
  std::vector<std::byte> text(100, std::byte{'a'});
  EXPECT_EQ(error_of(parse_elf(text, "x.txt")), "x.txt: not an ELF file");
  EXPECT_EQ(error_of(parse_elf({}, "empty")), "empty: not an ELF file (too short)");
}

TEST(ElfImageTest, RejectsWrongClassMachineOrType) {
  EXPECT_EQ(error_of(parse_elf(make_elf({{0x400000, 0x1000, 0x10, PF_R | PF_X}}, 0x400000,
                                        [](Elf64_Ehdr& e) { e.e_ident[EI_CLASS] = ELFCLASS32; }),
                               "p")),
            "p: not a 64-bit ELF file");
  EXPECT_EQ(error_of(parse_elf(make_elf({{0x400000, 0x1000, 0x10, PF_R | PF_X}}, 0x400000,
                                        [](Elf64_Ehdr& e) { e.e_machine = EM_AARCH64; }),
                               "p")),
            "p: not an x86-64 ELF file");
  EXPECT_EQ(error_of(parse_elf(make_elf({{0x400000, 0x1000, 0x10, PF_R | PF_X}}, 0x400000,
                                        [](Elf64_Ehdr& e) { e.e_type = ET_DYN; }),
                               "p")),
            "p: not a static executable (ELF type must be ET_EXEC)");
}

TEST(ElfImageTest, RejectsBrokenSegments) {
  auto truncated = make_elf({{0x400000, 0x1000, 0x100, PF_R | PF_X}}, 0x400000);
  truncated.resize(truncated.size() - 1);
  EXPECT_EQ(error_of(parse_elf(truncated, "p")), "p: segment 0 lies outside the file");
  EXPECT_EQ(error_of(parse_elf(make_elf({{0x400000, 0x10, 0x20, PF_R | PF_X}}, 0x400000), "p")),
            "p: segment 0 has filesz > memsz");
  EXPECT_EQ(error_of(parse_elf(
                make_elf({{0x400000, 0x2000, 0x10, PF_R | PF_X}, {0x401000, 0x1000, 0x10, PF_R}},
                         0x400000),
                "p")),
            "p: loadable segments overlap");
  EXPECT_EQ(error_of(parse_elf(make_elf({{0xFFFFFFFFFFFFF000ull, 0x2000, 0x10, PF_R | PF_X}},
                                        0xFFFFFFFFFFFFF000ull),
                               "p")),
            "p: segment 0 wraps the address space");
}

TEST(ElfImageTest, RejectsEntryOutsideExecutableSegment) {
  EXPECT_EQ(error_of(parse_elf(make_elf({{0x400000, 0x1000, 0x10, PF_R | PF_W}}, 0x400000), "p")),
            "p: entry point is not inside an executable segment");
  EXPECT_EQ(error_of(parse_elf(make_elf({{0x400000, 0x1000, 0x10, PF_R | PF_X}}, 0x500000), "p")),
            "p: entry point is not inside an executable segment");
}

TEST(ElfImageTest, RejectsProgramHeadersOutsideFile) {
  EXPECT_EQ(error_of(parse_elf(make_elf({{0x400000, 0x1000, 0x10, PF_R | PF_X}}, 0x400000,
                                        [](Elf64_Ehdr& e) { e.e_phoff = 1 << 20; }),
                               "p")),
            "p: program headers lie outside the file");
  EXPECT_EQ(error_of(parse_elf(make_elf({}, 0x400000), "p")),
            "p: program headers lie outside the file");
}

TEST(ElfImageTest, MissingFileIsAnError) {
  EXPECT_EQ(error_of(load_elf_file("/nonexistent/prog.elf", 1 << 20, "1 MiB")),
            "/nonexistent/prog.elf: cannot open (No such file or directory)");
}

// Kind and size are checked before a byte is read: /dev/zero named by mistake was read until
// memory ran out.
TEST(ElfImageTest, NoDeviceAndNothingLargerThanTheLimitIsRead) {
  EXPECT_EQ(error_of(load_elf_file("/dev/zero", 1 << 20, "1 MiB")),
            "/dev/zero: not a regular file");
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/big.elf";
  { std::ofstream(path) << std::string(4097, 'x'); }
  EXPECT_EQ(error_of(load_elf_file(path, 4096, "the guest's 4 KiB")),
            path + ": 4097 bytes, larger than the guest's 4 KiB");
  // A FIFO: refused at once, not waited on for a writer.
  const std::string fifo = std::string(std::getenv("TEST_TMPDIR")) + "/fifo.elf";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of(load_elf_file(fifo, 4096, "4 KiB")), fifo + ": not a regular file");
}

}  // namespace
}  // namespace vmm
