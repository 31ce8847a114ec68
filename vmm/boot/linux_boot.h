// Loads a Linux bzImage by the x86 64-bit boot protocol (Documentation/x86/boot.rst, "64-bit
// boot protocol"; DESIGN §4.9): setup header checks, the zero page (struct boot_params) with the
// e820 map derived from the guest's RAM, the command line, the initrd, and an MP table so that
// Linux finds every vCPU and the IOAPIC without ACPI. Nothing KVM-specific: the result is the
// entry point and the zero page's address (RSI), entered in long mode with the GDT of
// setup_long_mode_for_linux().
//
// Guest-physical layout (below 1 MiB, inside the 64 KiB Linux reserves at boot or the reserved
// last KiB of base memory; the boot GDT, TSS and page tables are guest_layout.h's):
//   0x0000_5000  Linux boot GDT (__BOOT_CS 0x10, __BOOT_DS 0x18)
//   0x0000_7000  zero page (struct boot_params)
//   0x0002_0000  command line (up to the kernel's cmdline_size)
//   0x0009_FC00  MP floating pointer + configuration table (e820: reserved)
//   pref_address the protected-mode kernel (typically 16 MiB), init_size bytes reserved for it
//   top of RAM   the initrd, page aligned, below initrd_addr_max and the 32-bit MMIO hole
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <variant>

#include "vmm/memory/guest_ram.h"
#include "vmm/result.h"

namespace vmm {

namespace linux_layout {
inline constexpr uint64_t kGdt = 0x5000;
inline constexpr uint64_t kZeroPage = 0x7000;
inline constexpr uint64_t kCommandLine = 0x20000;
inline constexpr uint64_t kCommandLineMax = 0x10000;  // what fits below the next structure
inline constexpr uint64_t kMpTable = 0x9FC00;
inline constexpr uint64_t kBaseMemoryEnd = 0xA0000;
inline constexpr uint16_t kBootCs = 0x10;
inline constexpr uint16_t kBootDs = 0x18;
inline constexpr uint16_t kBootTss = 0x20;
}  // namespace linux_layout

// What the setup header says, after the checks.
struct BzImage {
  uint16_t protocol = 0;         // e.g. 0x020F for 2.15
  uint64_t setup_bytes = 0;      // (setup_sects + 1) * 512: the protected-mode kernel starts here
  uint64_t load_address = 0;     // pref_address: where the protected-mode kernel goes
  uint64_t init_size = 0;        // bytes from load_address the kernel needs while it boots
  uint64_t initrd_addr_max = 0;  // highest address the initrd may occupy
  uint64_t cmdline_size = 0;     // longest command line, without the NUL
  uint16_t xloadflags = 0;
};

// True when `file` has the setup header's "HdrS" magic (tells a bzImage from an ELF kernel).
bool has_linux_boot_header(std::span<const uint8_t> file);

// Checks the setup header: boot flag 0xAA55, "HdrS", protocol >= 2.12 (xloadflags), a 64-bit
// entry point (XLF_KERNEL_64), LOADED_HIGH, a payload after the setup sectors. Returns the reason
// (one line, naming `name`) when the image cannot be booted.
Result<BzImage> parse_bzimage(std::span<const uint8_t> file, const std::string& name);

struct LinuxBootOptions {
  std::string cmdline;
  std::span<const uint8_t> initrd;  // empty: none
  std::string initrd_name;
  uint32_t vcpus = 1;
  uint32_t cpu_signature = 0;  // CPUID 1 EAX, for the MP table's processor entries
  uint32_t cpu_features = 0;   // CPUID 1 EDX
};

struct LinuxBoot {
  uint64_t entry = 0;      // 64-bit entry: load_address + 0x200
  uint64_t zero_page = 0;  // RSI at entry
  uint64_t initrd = 0, initrd_size = 0;
};

// Writes the kernel, zero page, command line, initrd and MP table into `ram`, or returns why it
// cannot (RAM untouched then): the kernel or initrd does not fit in RAM, the command line is too
// long for this kernel. `kernel_file` is the whole bzImage.
Result<LinuxBoot> load_linux(GuestRam& ram, std::span<const uint8_t> kernel_file,
                             const BzImage& image, const std::string& name,
                             const LinuxBootOptions& options);

}  // namespace vmm
