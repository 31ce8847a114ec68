// One guest: RAM, the KVM VM, one thread per vCPU, the devices, and each vCPU's PMU.
// A machine is built whole, in one of two ways: boot() loads a guest into fresh RAM and sets it at
// its entry point; resume() builds it from a snapshot's (or a migration's) memory and state. Built,
// it is ready to run; nothing in it asks later how it came to be.
// run() returns the guest's exit status (DESIGN §4.6), or throws VmmError (status 3) for a
// VMM/KVM failure or a guest crash (triple fault, internal error) with the vCPU registers in the
// message. A Linux guest ends the run by a reset (i8042 0xFE or a triple fault: `reboot -f`,
// status 0) or through the exit port; a Linux panic (its console's "end Kernel panic" line) is
// status 3 with that line.
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
  // Loads the guest (kernel and programs, or Linux) into fresh RAM, throwing UsageError
  // (status 2) for input that cannot work before KVM is touched; then the KVM VM, its devices and
  // vCPUs, with each vCPU's boot registers.
  static Machine boot(MachineOptions options);

  // Fills the new machine's RAM and gives the state it resumes from: a snapshot's files, or a
  // migration's pages and then its state. KVM, the devices and the vCPUs exist when it is called,
  // so a migration's destination builds them while the pages travel, outside the downtime.
  using Arrival = std::function<StateSections(GuestRam& ram)>;
  // An incoming migration's handover (migration_destination.h). `commit` is called once
  // everything that can fail is done (vCPU threads created and held, API socket bound) and before
  // any vCPU runs: it says ready, waits for the commit and says running, or throws when the VM
  // must not run here (the source keeps it). `stop_check` names a stop request (a signal,
  // vm.shutdown) that ends the wait. `fail_before_commit` tells the source why the destination
  // could not get that far.
  struct Handover {
    std::function<void(const std::function<std::optional<std::string>()>& stop_check)> commit;
    std::function<void(const std::string& reason)> fail_before_commit;
  };
  // The machine a snapshot's `manifest` describes (`options` from options_from_manifest, with the
  // caller's environment), in the state `arrive` gives: the guest keeps the CPUID it booted with
  // (UsageError when this host's KVM cannot present it) and nothing of the boot path runs — no
  // image is loaded, no boot register or table is written. Throws UsageError for a state that does
  // not fit, naming the section.
  static Machine resume(MachineOptions options, const SnapshotManifest& manifest,
                        const Arrival& arrive, std::optional<Handover> handover = std::nullopt);

  Machine(Machine&&) noexcept;
  ~Machine();
  int run();

 private:
  struct Impl;
  explicit Machine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace vmm
