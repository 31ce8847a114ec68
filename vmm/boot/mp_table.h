// The Intel MultiProcessor Specification 1.4 tables a PC BIOS leaves for the OS: a floating
// pointer ("_MP_") and a configuration table ("PCMP") listing every vCPU (local APIC ID = vCPU
// index, the first one the bootstrap processor), one ISA bus, the IOAPIC at 0xFEC00000 and the
// routing of ISA IRQs 0–15 to its pins. Linux without ACPI (CONFIG_X86_MPPARSE) finds the
// application processors and the IOAPIC only here.
//
// Routing: KVM's in-kernel irqchip wires GSI n to IOAPIC pin n (and ISA IRQs also to the PIC), so
// ISA IRQ n goes to pin n — the PIT on GSI 0 included, as KVM_CREATE_PIT2 injects it there. LINT0
// is ExtINT (the PIC through the local APIC, as firmware leaves it), LINT1 NMI.
#pragma once

#include <cstdint>

#include "vmm/memory/guest_ram.h"

namespace vmm {

struct MpTableOptions {
  uint32_t vcpus = 1;
  uint32_t cpu_signature = 0;  // CPUID 1 EAX
  uint32_t cpu_features = 0;   // CPUID 1 EDX
};

inline constexpr uint8_t kMpIoApicVersion = 0x11;  // KVM's IOAPIC (82093AA-compatible)
inline constexpr uint8_t kMpLocalApicVersion = 0x14;
inline constexpr uint64_t kIoApicAddress = 0xFEC00000;
inline constexpr uint64_t kLocalApicAddress = 0xFEE00000;

// Bytes the tables take for `vcpus` processors.
uint64_t mp_table_size(uint32_t vcpus);

// Writes both tables at `gpa` (16-byte aligned). False when they do not fit in `room` bytes or
// the vCPU count does not fit an 8-bit APIC ID below the IOAPIC's.
bool write_mp_table(GuestRam& ram, uint64_t gpa, uint64_t room, const MpTableOptions& options);

}  // namespace vmm
