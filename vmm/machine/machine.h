// One guest: RAM, the KVM VM, one thread per vCPU, the devices, and each vCPU's PMU.
// The constructor allocates RAM and loads the kernel and programs, throwing UsageError (status 2)
// for input that cannot work — before KVM is touched. run() opens KVM, boots, and returns the
// guest's exit status (DESIGN §4.6), or throws VmmError (status 3) for a VMM/KVM failure or a
// guest crash (triple fault, internal error) with the vCPU registers in the message. A Linux guest
// ends the run by a reset (i8042 0xFE or a triple fault: `reboot -f`, status 0) or through the
// exit port; a Linux panic (its console's "end Kernel panic" line) is status 3 with that line.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "vmm/machine/machine_options.h"
#include "vmm/memory/guest_ram.h"
#include "vmm/snapshot/snapshot_manifest.h"
#include "vmm/snapshot/state_sections.h"

namespace vmm {

// The options a snapshot's manifest fixes (machine and CPU); the caller adds its own outputs.
MachineOptions options_from_manifest(const SnapshotManifest& manifest);

// The CPUID bits of a snapshot's guest that this host's KVM (at `kvm_device`) cannot present,
// one line per register; empty when it can present all of them. Opens KVM; throws VmmError when
// it cannot.
std::vector<std::string> host_cpuid_refusals(const SnapshotManifest& manifest,
                                             const std::string& kvm_device);

class Machine {
 public:
  explicit Machine(MachineOptions options);
  ~Machine();
  int run();
  // Creates the KVM VM, its vCPUs and devices now instead of in run(): a migration destination
  // does it while the pages arrive, so that it is not part of the downtime.
  void set_up_kvm();
  // Guest RAM, e.g. for a restore to fill before run().
  GuestRam& ram();
  // The state of a migration, which arrives after the machine (its RAM) had to exist.
  void set_restored_state(StateSections state);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vmm
