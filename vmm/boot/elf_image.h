// Static ELF64 x86-64 executables (the bundled guest kernel and the user programs): parsed and
// checked completely before anything is placed in guest memory, so a bad file is a one-line
// error and never a partial load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "vmm/result.h"

namespace vmm {

struct ElfSegment {
  uint64_t vaddr = 0;
  uint64_t paddr = 0;
  uint64_t memsz = 0;
  uint64_t filesz = 0;
  uint64_t file_offset = 0;
  bool readable = false, writable = false, executable = false;
};

struct ElfImage {
  uint64_t entry = 0;
  std::vector<ElfSegment> segments;  // PT_LOAD only, in file order, non-empty
  std::vector<std::byte> bytes;      // the whole file

  uint64_t lowest_vaddr() const;
  uint64_t highest_vaddr_end() const;  // one past the last byte of the highest segment
  // The bytes of `segment` in the file (filesz of them); the rest up to memsz is zero.
  std::span<const std::byte> contents(const ElfSegment& segment) const;
};

// Parses `bytes` (named `name` in errors). Accepts ELFCLASS64, little-endian, EM_X86_64, ET_EXEC,
// with at least one PT_LOAD, segments inside the file, filesz <= memsz, no overlap between
// segments, no address wrap, and an entry point inside an executable segment.
Result<ElfImage> parse_elf(std::vector<std::byte> bytes, const std::string& name);

// Reads (read_image_file: a regular file of at most `limit` bytes, `limit_why` saying what the
// limit is) and parses a file; errors name the path ("prog.elf: not an ELF file").
Result<ElfImage> load_elf_file(const std::string& path, uint64_t limit,
                               const std::string& limit_why);

}  // namespace vmm
