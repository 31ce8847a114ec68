// ELF64 parsing: a good static executable loads; every malformed file is a one-line error that
// names the file.
#include "vmm/loader/elf_image.h"

#include <elf.h>
#include <gtest/gtest.h>

#include <cstring>
#include <variant>

namespace vmm {
namespace {

struct Seg {
  uint64_t vaddr, memsz, filesz;
  uint32_t flags;
};

// Builds an ELF64 image: header, program headers, then each segment's file bytes (0xCC).
std::vector<std::byte> make_elf(std::vector<Seg> segs, uint64_t entry,
                                void (*tweak)(Elf64_Ehdr&) = nullptr) {
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_EXEC;
  eh.e_machine = EM_X86_64;
  eh.e_version = EV_CURRENT;
  eh.e_entry = entry;
  eh.e_phoff = sizeof eh;
  eh.e_ehsize = sizeof eh;
  eh.e_phentsize = sizeof(Elf64_Phdr);
  eh.e_phnum = static_cast<uint16_t>(segs.size());
  if (tweak) tweak(eh);
  uint64_t offset = sizeof eh + segs.size() * sizeof(Elf64_Phdr);
  std::vector<std::byte> out(offset);
  std::memcpy(out.data(), &eh, sizeof eh);
  for (size_t i = 0; i < segs.size(); ++i) {
    Elf64_Phdr ph{};
    ph.p_type = PT_LOAD;
    ph.p_flags = segs[i].flags;
    ph.p_offset = offset;
    ph.p_vaddr = ph.p_paddr = segs[i].vaddr;
    ph.p_filesz = segs[i].filesz;
    ph.p_memsz = segs[i].memsz;
    ph.p_align = 4096;
    std::memcpy(out.data() + sizeof eh + i * sizeof ph, &ph, sizeof ph);
    out.resize(out.size() + segs[i].filesz, std::byte{0xCC});
    offset += segs[i].filesz;
  }
  return out;
}

std::string error_of(std::variant<ElfImage, std::string> r) {
  return std::holds_alternative<std::string>(r) ? std::get<std::string>(r) : "";
}

TEST(ElfImageTest, ParsesStaticExecutable) {
  auto r = parse_elf(make_elf({{0x400000, 0x2000, 0x100, PF_R | PF_X}, {0x600000, 0x1000, 0x10, PF_R | PF_W}},
                              0x400010),
                     "prog");
  ASSERT_TRUE(std::holds_alternative<ElfImage>(r)) << error_of(r);
  const ElfImage& img = std::get<ElfImage>(r);
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
  EXPECT_EQ(error_of(parse_elf(make_elf({{0x400000, 0x2000, 0x10, PF_R | PF_X},
                                         {0x401000, 0x1000, 0x10, PF_R}},
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
  EXPECT_EQ(error_of(load_elf_file("/nonexistent/prog.elf")),
            "/nonexistent/prog.elf: cannot open (No such file or directory)");
}

}  // namespace
}  // namespace vmm
