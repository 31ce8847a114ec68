#include "vmm/boot/long_mode.h"

#include <algorithm>
#include <stdexcept>

#include "vmm/boot/guest_layout.h"
#include "vmm/boot/linux_boot.h"

namespace vmm {
namespace {

constexpr uint64_t kPresent = 1, kWritable = 2, kLarge = 0x80;

// An 8-byte code/data descriptor: base 0, limit 0xFFFFF with G=1.
uint64_t descriptor(uint8_t type, uint8_t dpl, bool long_mode, bool db) {
  uint64_t d = 0xFFFF;        // limit 15:0
  d |= uint64_t{type} << 40;  // type
  d |= uint64_t{1} << 44;     // S: code/data
  d |= uint64_t{dpl} << 45;
  d |= uint64_t{1} << 47;    // present
  d |= uint64_t{0xF} << 48;  // limit 19:16
  d |= uint64_t{long_mode} << 53;
  d |= uint64_t{db} << 54;
  d |= uint64_t{1} << 55;  // G
  return d;
}

SegmentState segment(uint16_t selector, uint8_t type, uint8_t dpl, bool long_mode, bool db) {
  return SegmentState{0, 0xFFFFFFFF, selector, type, 1, dpl, db, 1, long_mode, 1};
}

}  // namespace

LongModeState setup_long_mode(GuestRam& ram) {
  if (ram.size() < layout::kKernelMin + (2u << 20))
    throw std::runtime_error("guest RAM too small for the boot layout (needs more than 3 MiB)");
  constexpr uint8_t kCode = 0xB, kData = 0x3;  // accessed code (execute/read), data (read/write)
  const uint64_t gdt[] = {
      0,
      descriptor(kCode, 0, true, false),  // 0x08 kernel code64
      descriptor(kData, 0, false, true),  // 0x10 kernel data
      descriptor(kData, 3, false, true),  // 0x18 user data
      descriptor(kCode, 3, true, false),  // 0x20 user code64
  };
  for (size_t i = 0; i < std::size(gdt); ++i) ram.write_u64(layout::kGdt + i * 8, gdt[i]);
  // 0x28: 16-byte 64-bit TSS descriptor, type 0xB (busy), limit 0x67.
  const uint64_t tss = layout::kBootTss;
  uint64_t low = 0x67 | ((tss & 0xFFFFFF) << 16) | (uint64_t{0xB} << 40) | (uint64_t{1} << 47) |
                 (((tss >> 24) & 0xFF) << 56);
  ram.write_u64(layout::kGdt + 0x28, low);
  ram.write_u64(layout::kGdt + 0x30, tss >> 32);

  // Identity map with 2 MiB pages: PML4[0] -> PDPT, PDPT[i] -> PD i (one per GiB).
  const uint64_t pml4 = layout::kPageTables, pdpt = pml4 + 0x1000, pd0 = pdpt + 0x1000;
  const uint64_t mapped = ram.low_size();  // RAM below the 32-bit MMIO hole
  const uint64_t gibs = (mapped + (1ull << 30) - 1) >> 30;
  for (uint64_t off = 0; off < 0x1000 * (2 + gibs); off += 8) ram.write_u64(pml4 + off, 0);
  ram.write_u64(pml4, pdpt | kPresent | kWritable);
  for (uint64_t g = 0; g < gibs; ++g) {
    const uint64_t pd = pd0 + g * 0x1000;
    ram.write_u64(pdpt + g * 8, pd | kPresent | kWritable);
    for (uint64_t e = 0; e < 512; ++e) {
      const uint64_t phys = (g << 30) | (e << 21);
      if (phys >= mapped) break;
      ram.write_u64(pd + e * 8, phys | kPresent | kWritable | kLarge);
    }
  }

  LongModeState s;
  s.cs = segment(layout::kKernelCs, kCode, 0, true, false);
  s.ds = s.es = s.fs = s.gs = s.ss = segment(layout::kKernelDs, kData, 0, false, true);
  s.tr = SegmentState{tss, 0x67, layout::kTss, 0xB, 1, 0, 0, 0, 0, 0};
  s.ldt = SegmentState{0, 0xFFFF, 0, 0x2, 1, 0, 0, 0, 0, 0};
  s.gdt_base = layout::kGdt;
  s.gdt_limit = 0x37;
  s.cr0 = 0x80050033;  // PG | AM | WP | NE | ET | MP | PE
  s.cr3 = pml4;
  s.cr4 = 0x620;   // OSXMMEXCPT | OSFXSR | PAE: user programs may use SSE
  s.efer = 0xD01;  // NXE | LMA | LME | SCE
  return s;
}

LongModeState setup_long_mode_for_linux(GuestRam& ram) {
  LongModeState s = setup_long_mode(ram);
  constexpr uint8_t kCode = 0xB, kData = 0x3;
  const uint64_t gdt = linux_layout::kGdt;
  ram.write_u64(gdt + 0x00, 0);
  ram.write_u64(gdt + 0x08, 0);
  ram.write_u64(gdt + linux_layout::kBootCs, descriptor(kCode, 0, true, false));
  ram.write_u64(gdt + linux_layout::kBootDs, descriptor(kData, 0, false, true));
  // The boot TSS descriptor again (KVM wants a usable TR), at the next slot.
  uint64_t tss_low = 0, tss_high = 0;
  ram.read_u64(layout::kGdt + layout::kTss, tss_low);
  ram.read_u64(layout::kGdt + layout::kTss + 8, tss_high);
  ram.write_u64(gdt + linux_layout::kBootTss, tss_low);
  ram.write_u64(gdt + linux_layout::kBootTss + 8, tss_high);
  s.cs.selector = linux_layout::kBootCs;
  s.ds.selector = s.es.selector = s.fs.selector = s.gs.selector = s.ss.selector =
      linux_layout::kBootDs;
  s.tr.selector = linux_layout::kBootTss;
  s.gdt_base = gdt;
  s.gdt_limit = linux_layout::kBootTss + 15;
  return s;
}

}  // namespace vmm
