// Places the guest kernel and the user programs into guest RAM and writes the boot information
// block the bundled kernel reads (guest/abi/pmuvm_abi.h). Everything is checked before the first
// byte is copied, and every problem is one line naming the file: programs overlapping the
// kernel, too little RAM, too many programs/segments/arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "vmm/boot/elf_image.h"
#include "vmm/memory/guest_ram.h"
#include "vmm/result.h"

namespace vmm {

struct GuestProgram {
  std::string path;  // for messages and the task name
  ElfImage image;
  std::vector<std::string> args;  // argv[1..]; argv[0] is the file name
};

struct BootParameters {
  uint32_t vcpu_count = 1;
  uint32_t pv_features = 0;
  uint32_t timer_hz = 100;
};

struct LoadedGuest {
  uint64_t kernel_entry = 0;
  uint64_t boot_info = 0;  // guest-physical address of struct pmuvm_boot_info
  uint64_t free_phys_start = 0;
};

// The smallest --mem (MiB) that fits this kernel and these programs, for the error message.
uint64_t minimum_ram_mib(const ElfImage& kernel, const std::vector<GuestProgram>& programs);

// Loads everything or returns the reason it cannot (RAM untouched in that case).
Result<LoadedGuest> load_guest(GuestRam& ram, const ElfImage& kernel,
                               const std::string& kernel_name,
                               const std::vector<GuestProgram>& programs,
                               const BootParameters& params);

}  // namespace vmm
