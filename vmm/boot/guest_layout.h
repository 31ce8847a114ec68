// Where pmuvm puts things in guest-physical memory at boot. The bundled kernel reads the boot
// information at kBootInfo (address passed in RDI) and owns everything above its image.
//
//   0x0000_1000  GDT (kGdt): null, kernel code64, kernel data, user data, user code64, TSS
//   0x0000_2000  TSS for the boot vCPU (the kernel installs its own per-CPU TSS later)
//   0x0000_3000  boot information block (kBootInfo), one page
//   0x0000_8000  boot page tables: PML4, PDPT, PDs (identity map of the RAM below the MMIO hole)
//   0x0010_0000  kernel image (its ELF physical addresses; must not go below 1 MiB)
//   above        user program images, placed by the VMM, described in the boot information
#pragma once

#include <cstdint>

namespace vmm::layout {

inline constexpr uint64_t kGdt = 0x1000;
inline constexpr uint64_t kBootTss = 0x2000;
inline constexpr uint64_t kBootInfo = 0x3000;
inline constexpr uint64_t kPageTables = 0x8000;
inline constexpr uint64_t kKernelMin = 0x100000;

// Selectors. The order kernel-code, kernel-data, user-data, user-code matches what SYSCALL and
// SYSRET derive from IA32_STAR (STAR[47:32] = 0x08, STAR[63:48] = 0x10).
inline constexpr uint16_t kKernelCs = 0x08;
inline constexpr uint16_t kKernelDs = 0x10;
inline constexpr uint16_t kUserDs = 0x18 | 3;
inline constexpr uint16_t kUserCs = 0x20 | 3;
inline constexpr uint16_t kTss = 0x28;

}  // namespace vmm::layout
