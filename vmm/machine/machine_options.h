// What a Machine is built from (vmm/machine/machine.h): the guest, its CPU profile and size, the
// counting backend, the outputs, the API socket and the progress points. A resumed machine takes
// the machine and CPU from its snapshot's manifest (options_from_manifest) and its state from
// Machine::resume.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "vmm/boot/guest_loader.h"
#include "vmm/boot/linux_boot.h"
#include "vmm/cpu/cpu_profile.h"
#include "vmm/counting/counting_choice.h"
#include "vmm/machine/run_environment.h"
#include "vmm/machine_shape.h"

namespace vmm {

// Beside its own fields, what it talks to and writes (RunEnvironment) and where it pauses itself
// (PausePoints: vmm/machine/run_environment.h).
struct MachineOptions : RunEnvironment, PausePoints, MachineShape {
  CpuProfile profile;
  ElfImage kernel;  // the bundled kernel (or an ELF one), unless linux_guest is set
  // A Linux guest (DESIGN §4.9) instead: the whole bzImage, its checked setup header, the initrd
  // and the command line. No programs then; Linux runs what its initramfs holds.
  struct LinuxGuest {
    std::vector<uint8_t> bzimage;
    BzImage image;
    std::vector<uint8_t> initrd;
    std::string initrd_name;
    std::string cmdline;
  };
  std::optional<LinuxGuest> linux_guest;
  std::string kernel_name = "bundled kernel";
  std::vector<GuestProgram> programs;
  // How it counts (DESIGN §4.7, §4.11): the stepper, and the host backend when it is chosen.
  CountingChoice counting;
  uint64_t debug_pause_every = 0;  // pause and resume the VM every N exits of vCPU 0 (0: never)
};

}  // namespace vmm
