// How a run counts (DESIGN §4.7, §4.11): the command line names a backend, a stepper and the
// host backend's counters (vmm/counting_kinds.h); choose_counting resolves them once, with the
// reason, into the CountingChoice every vCPU's counting backend is built from
// (vmm/counting/make_counting_backend.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "vmm/counting_kinds.h"
#include "vmm/host/free_run.h"
#include "vmm/result.h"

namespace vmm {

// What this host can count for the host backend (probed once at start-up).
struct HostCapabilities {
  std::optional<std::string> instructions_missing;  // why guest instructions cannot be counted
  std::optional<std::string> branches_missing;      // why guest branches cannot be counted
  std::optional<std::string> conditional_branches_missing;  // ... conditional branches
  std::optional<int> perf_event_paranoid;                   // /proc/sys/kernel/perf_event_paranoid
  static HostCapabilities probe();
};

// What the command line asked.
struct CountingRequest {
  BackendKind backend = BackendKind::kAuto;
  StepperKind stepper = StepperKind::kAuto;
  HostCountersKind host_counters = HostCountersKind::kPerf;
  uint64_t double_skid = 0;
  uint64_t skid_margin = 128;
  bool host_counters_given = false;
  bool double_skid_given = false;
  bool skid_margin_given = false;
  bool linux_guest = false;  // a Linux guest cannot help a stepper
};

// The host backend (DESIGN §4.11; steps with the KVM stepper): between event boundaries the
// guest runs unseen while host counters count.
struct HostBackendChoice {
  // The counter double instead of the host PMU: its overflows come `double_skid` instructions
  // late.
  bool counter_double = false;
  uint64_t double_skid = 0;
  FreeRunOptions free_run;
};

// The resolved choice: nothing in it is `auto`.
struct CountingChoice {
  StepperKind stepper = StepperKind::kKvm;
  std::optional<HostBackendChoice> host;  // nullopt: the precise backend steps everything
  std::string why;                        // what was asked, what the host offers

  // A resumed VM counts as its manifest says (`stepper`: a name parse_stepper accepted).
  static CountingChoice resumed(StepperKind stepper);
  // The stepper uses KVM's guest debugging (start-up checks that KVM serves it).
  bool kvm_stepping() const;
  // The paravirtual features the bundled kernel is offered (guest/abi/pmuvm_abi.h).
  uint32_t pv_features() const;
  // The start-up line: "counting backend: ...".
  std::string describe() const;
};

// The choice, or a usage error (one line). `probe` is asked only when the host backend may be
// taken.
Result<CountingChoice> choose_counting(const CountingRequest& request,
                                       const std::function<HostCapabilities()>& probe);

}  // namespace vmm
