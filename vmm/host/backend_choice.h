// Which counting backend a run uses (DESIGN §4.11): from --backend, --stepper, the host
// backend's options and what this host's PMU can count. `host` where it cannot work is a usage
// error naming what is missing; `auto` takes the host backend only where the host PMU counts
// guest instructions, and says why not otherwise.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "vmm/result.h"

namespace vmm {

// What this host can count for the host backend (probed once at start-up).
struct HostCapabilities {
  std::optional<std::string> instructions_missing;  // why guest instructions cannot be counted
  std::optional<std::string> branches_missing;      // why guest branches cannot be counted
  std::optional<int> perf_event_paranoid;           // /proc/sys/kernel/perf_event_paranoid
  static HostCapabilities probe();
};

struct BackendRequest {
  std::string backend = "auto";        // precise | host | auto
  std::string stepper = "auto";        // kvm | kvm-single | guest | auto
  std::string host_counters = "perf";  // perf | double
  bool host_counters_given = false;
  bool double_skid_given = false;
  bool skid_margin_given = false;
};

struct BackendChoice {
  bool host = false;
  bool counter_double = false;
  bool count_branches = false;  // the host counters count branches too (else branch events step)
  std::string why;              // for the start-up line: what was asked, what the host offers
};

// The choice, or a usage error (one line).
Result<BackendChoice> choose_backend(const BackendRequest& request, const HostCapabilities& host);

}  // namespace vmm
