#include "vmm/boot/elf_image.h"

#include "vmm/boot/image_file.h"
#include "vmm/result.h"

#include <elf.h>

#include <algorithm>
#include <cstring>

namespace vmm {

uint64_t ElfImage::lowest_vaddr() const {
  uint64_t low = UINT64_MAX;
  for (const ElfSegment& s : segments) low = std::min(low, s.vaddr);
  return low;
}

uint64_t ElfImage::highest_vaddr_end() const {
  uint64_t high = 0;
  for (const ElfSegment& s : segments) high = std::max(high, s.vaddr + s.memsz);
  return high;
}

std::span<const std::byte> ElfImage::contents(const ElfSegment& segment) const {
  return std::span<const std::byte>(bytes).subspan(segment.file_offset, segment.filesz);
}

Result<ElfImage> parse_elf(std::vector<std::byte> bytes, const std::string& name) {
  auto fail = [&](const std::string& why) { return name + ": " + why; };
  Elf64_Ehdr eh;
  if (bytes.size() < sizeof eh) return Error::usage(fail("not an ELF file (too short)"));
  std::memcpy(&eh, bytes.data(), sizeof eh);
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return Error::usage(fail("not an ELF file"));
  if (eh.e_ident[EI_CLASS] != ELFCLASS64) return Error::usage(fail("not a 64-bit ELF file"));
  if (eh.e_ident[EI_DATA] != ELFDATA2LSB) return Error::usage(fail("not a little-endian ELF file"));
  if (eh.e_machine != EM_X86_64) return Error::usage(fail("not an x86-64 ELF file"));
  if (eh.e_type != ET_EXEC)
    return Error::usage(fail("not a static executable (ELF type must be ET_EXEC)"));
  if (eh.e_phentsize != sizeof(Elf64_Phdr))
    return Error::usage(fail("unexpected program header size"));
  const uint64_t ph_end = eh.e_phoff + uint64_t{eh.e_phnum} * sizeof(Elf64_Phdr);
  if (eh.e_phnum == 0 || eh.e_phoff > bytes.size() || ph_end > bytes.size() || ph_end < eh.e_phoff)
    return Error::usage(fail("program headers lie outside the file"));

  ElfImage image;
  image.entry = eh.e_entry;
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    std::memcpy(&ph, bytes.data() + eh.e_phoff + i * sizeof ph, sizeof ph);
    if (ph.p_type != PT_LOAD || ph.p_memsz == 0) continue;
    if (ph.p_filesz > ph.p_memsz)
      return Error::usage(fail("segment " + std::to_string(i) + " has filesz > memsz"));
    if (ph.p_offset > bytes.size() || ph.p_filesz > bytes.size() - ph.p_offset)
      return Error::usage(fail("segment " + std::to_string(i) + " lies outside the file"));
    if (ph.p_vaddr + ph.p_memsz < ph.p_vaddr)
      return Error::usage(fail("segment " + std::to_string(i) + " wraps the address space"));
    image.segments.push_back(ElfSegment{ph.p_vaddr, ph.p_paddr, ph.p_memsz, ph.p_filesz,
                                        ph.p_offset, (ph.p_flags & PF_R) != 0,
                                        (ph.p_flags & PF_W) != 0, (ph.p_flags & PF_X) != 0});
  }
  if (image.segments.empty()) return Error::usage(fail("no loadable segment"));
  std::vector<ElfSegment> sorted = image.segments;
  std::sort(sorted.begin(), sorted.end(),
            [](const ElfSegment& a, const ElfSegment& b) { return a.vaddr < b.vaddr; });
  for (size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i - 1].vaddr + sorted[i - 1].memsz > sorted[i].vaddr)
      return Error::usage(fail("loadable segments overlap"));
  const bool entry_ok = std::any_of(sorted.begin(), sorted.end(), [&](const ElfSegment& s) {
    return s.executable && image.entry >= s.vaddr && image.entry < s.vaddr + s.memsz;
  });
  if (!entry_ok) return Error::usage(fail("entry point is not inside an executable segment"));
  image.bytes = std::move(bytes);
  return image;
}

Result<ElfImage> load_elf_file(const std::string& path, uint64_t limit,
                               const std::string& limit_why) {
  auto bytes = read_image_file<std::byte>(path, limit, limit_why);
  if (!bytes.ok()) return bytes.error();
  return parse_elf(std::move(bytes.value()), path);
}

}  // namespace vmm
