// The source side of a live migration (DESIGN §4.10): hello and the destination's verdict,
// pre-copy rounds of RAM while the guest runs (KVM's dirty log plus the VMM's own writes), then
// the VM is paused for the rest of RAM and all other state, and handed over on kCommit.
// If anything fails before kCommit is sent the VM is resumed as it was: it loses nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "vmm/snapshot/migratable_vm.h"

namespace vmm {

struct MigrationStats {
  std::vector<uint64_t> pages_per_round;  // round 0 = every non-zero page
  uint64_t final_pages = 0;               // sent while paused
  uint64_t state_bytes = 0;
  double total_ms = 0;
  double downtime_ms = 0;  // paused: from pause() to kCommit
};

struct MigrationOutcome {
  bool handed_over = false;  // true: the destination runs the VM now; the source must end
  std::string error;         // why not (the source VM runs on)
  MigrationStats stats;
};

// Pre-copy stops when a round has at most `converged_pages` dirty pages, or after `max_rounds`.
MigrationOutcome migrate_to(const std::string& socket_path, MigratableVm& vm,
                            uint32_t max_rounds = 30, uint64_t converged_pages = 64);

}  // namespace vmm
