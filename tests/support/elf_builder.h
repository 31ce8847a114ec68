// Builds small ELF64 x86-64 executables in memory for loader tests: header, program headers,
// then each segment's file bytes (filled with `fill`).
#pragma once

#include <elf.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace pmu::testing {

struct ElfSegmentSpec {
  uint64_t vaddr, memsz, filesz;
  uint32_t flags;
  uint64_t paddr = 0;  // 0: same as vaddr
};

inline std::vector<std::byte> make_elf(const std::vector<ElfSegmentSpec>& segs, uint64_t entry,
                                       void (*tweak)(Elf64_Ehdr&) = nullptr,
                                       std::byte fill = std::byte{0xCC}) {
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
    ph.p_vaddr = segs[i].vaddr;
    ph.p_paddr = segs[i].paddr ? segs[i].paddr : segs[i].vaddr;
    ph.p_filesz = segs[i].filesz;
    ph.p_memsz = segs[i].memsz;
    ph.p_align = 4096;
    std::memcpy(out.data() + sizeof eh + i * sizeof ph, &ph, sizeof ph);
    out.resize(out.size() + segs[i].filesz, fill);
    offset += segs[i].filesz;
  }
  return out;
}

}  // namespace pmu::testing
