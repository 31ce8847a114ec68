// What a Machine is built from (vmm/machine/machine.h): the guest, its CPU profile and size, the
// counting backend, the outputs, the API socket and the progress points; or a snapshot's state
// to resume from.
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
#include "vmm/snapshot/snapshot_manifest.h"
#include "vmm/snapshot/state_sections.h"

namespace vmm {

// Beside its own fields, what it talks to and writes (RunEnvironment) and where it pauses itself
// (PausePoints: vmm/machine/run_environment.h).
struct MachineOptions : RunEnvironment, PausePoints {
  CpuProfile profile;
  uint32_t vcpus = 1;
  uint64_t mem_mib = 256;
  uint64_t seed = 0;
  uint32_t timer_hz = 100;  // the bundled kernel's tick; 0 = none (not used by Linux)
  ElfImage kernel;          // the bundled kernel (or an ELF one), unless linux_guest is set
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
  uint32_t max_interrupts_per_second =
      10000;  // storm protection (pmu/rate_limited_interrupt_sink.h)
  // How it counts (DESIGN §4.7, §4.11): the stepper, and the host backend when it is chosen.
  CountingChoice counting;
  uint64_t debug_pause_every = 0;  // pause and resume the VM every N exits of vCPU 0 (0: never)

  // A VM that resumes from a snapshot or an incoming migration instead of booting: nothing is
  // loaded, RAM is filled by the caller (Machine::ram()) before run(), and run() loads this
  // state into KVM and the models. The manifest's machine and CPU override the options above.
  struct Restore {
    SnapshotManifest manifest;
    StateSections state;
    // A migration's destination (migration_destination.h). `commit` is called once everything
    // that can fail is done (state loaded, vCPU threads created and held, API socket bound) and
    // before any vCPU runs: it says ready, waits for the commit and says running, or throws
    // when the VM must not run here (the source keeps it). `stop_check` names a stop request
    // (a signal, vm.shutdown) that ends the wait. `fail_before_commit` tells the source why the
    // destination could not get that far.
    std::function<void(const std::function<std::optional<std::string>()>& stop_check)> commit;
    std::function<void(const std::string& reason)> fail_before_commit;
  };
  std::optional<Restore> restore;
};

}  // namespace vmm
