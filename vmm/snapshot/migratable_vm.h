// What snapshots and migrations need from a running VM, and nothing else: the snapshot and
// migration code (this package) never sees the run loop, and the Machine never sees file
// formats or sockets.
#pragma once

#include <cstdint>
#include <vector>

#include "vmm/memory/guest_ram.h"
#include "vmm/snapshot/snapshot_manifest.h"
#include "vmm/snapshot/state_sections.h"

namespace vmm {

class MigratableVm {
 public:
  virtual ~MigratableVm() = default;
  virtual GuestRam& guest_ram() = 0;
  // The machine and the CPU the guest sees (files left empty).
  virtual SnapshotManifest manifest() = 0;
  // Stops every vCPU between instructions (pending I/O and MSR accesses completed) and returns
  // once all are parked; resume() lets them go on. Nested: a VM the user paused stays paused.
  // Returns false when the run has ended instead (the guest exited meanwhile): then there is
  // nothing to save or hand over, and nothing to resume.
  virtual bool pause() = 0;
  virtual void resume() = 0;
  // Everything but RAM, while paused: KVM vCPU and device state, the PMU models, the steppers,
  // the VMM's devices and the report.
  virtual StateSections capture_state() = 0;
  // Pre-copy: start or stop logging the pages the guest (KVM) and the VMM write, and take the
  // guest-physical page numbers written since the last call.
  virtual void set_dirty_tracking(bool on) = 0;
  virtual std::vector<uint64_t> take_dirty_pages() = 0;
};

}  // namespace vmm
