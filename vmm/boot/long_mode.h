// Builds the state a vCPU needs to start directly in 64-bit long mode: a GDT, a TSS and identity
// page tables in guest RAM, and the segment/control-register values to load. Written without
// KVM types so it is testable anywhere; the KVM layer copies it into kvm_sregs.
#pragma once

#include <cstdint>
#include <string>

#include "vmm/memory/guest_ram.h"

namespace vmm {

struct SegmentState {
  uint64_t base = 0;
  uint32_t limit = 0;
  uint16_t selector = 0;
  uint8_t type = 0, present = 0, dpl = 0, db = 0, s = 0, l = 0, g = 0;
};

struct LongModeState {
  SegmentState cs, ds, es, fs, gs, ss, tr, ldt;
  uint64_t gdt_base = 0;
  uint16_t gdt_limit = 0;
  uint64_t cr0 = 0, cr3 = 0, cr4 = 0, efer = 0;
};

// Writes the GDT, boot TSS and page tables (identity map of min(RAM, 4 GiB) with 2 MiB pages,
// supervisor-only) and returns the register state. Throws std::runtime_error if RAM is too small.
LongModeState setup_long_mode(GuestRam& ram);

// The same page tables and TSS, with the GDT Linux's 64-bit boot protocol asks for
// (Documentation/x86/boot.rst): flat __BOOT_CS at selector 0x10 and __BOOT_DS at 0x18, CS =
// __BOOT_CS and DS/ES/SS = __BOOT_DS (linux_boot.h's layout). Linux loads its own GDT at once.
LongModeState setup_long_mode_for_linux(GuestRam& ram);

}  // namespace vmm
