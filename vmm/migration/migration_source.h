// The source side of a live migration (DESIGN §4.10): hello and the destination's verdict,
// pre-copy rounds of RAM while the guest runs (KVM's dirty log plus the VMM's own writes), then
// the VM is paused for the rest of RAM and all other state, committed, and let go only when the
// destination says it runs (kRunning). If anything fails before that, or a deadline passes, the
// VM is resumed as it was: it loses nothing.
#pragma once

#include <cstdint>
#include <functional>
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

struct MigrationLimits {
  // Pre-copy stops when a round has at most `converged_pages` dirty pages, or after `max_rounds`.
  uint32_t max_rounds = 30;
  uint64_t converged_pages = 64;
  // Every answer of the destination must be whole within this, every message must be taken by
  // it within this, and the paused phase as a whole (pause to kRunning) ends by it: past it the
  // VM resumes here. Deadlines, not idle timeouts: a peer that drips bytes gains nothing.
  int deadline_ms = 60'000;
  // Asked at least every 100 ms while waiting: a reason (a stop signal, the run ended) ends the
  // migration with it.
  std::function<std::optional<std::string>()> stop_check;
};

MigrationOutcome migrate_to(const std::string& socket_path, MigratableVm& vm,
                            const MigrationLimits& limits = {});

}  // namespace vmm
