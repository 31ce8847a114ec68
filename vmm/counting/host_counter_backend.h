// The host backend (DESIGN §4.11, rr's method) as a counting backend. Between the PMU models'
// event boundaries a vCPU runs unseen while its host counters count CPL-3 instructions (and
// branches); they overflow the skid margin short of the next boundary (vmm/host/free_run.h).
// Any return from KVM_RUN — the overflow's kick, an exit — ends the free run before the exit is
// handled, and the models take the count as one batch; the instructions left up to the boundary
// are stepped by the KVM stepper beneath (kvm_stepping_backend.h) exactly as with the precise
// backend, so the event is seen at its instruction and the records are the precise backend's.
//
// With the counter double (--host-counters double) the KVM stepper steps the guest all along,
// and during a free run what it retires goes to the double instead of the models: the same
// algorithm, with overflows that come a chosen number of instructions late; only an exit of the
// guest's own or a pause ends its free run early, never a kick, so its records do not depend on
// the host's timing.
#pragma once

#include <memory>
#include <optional>

#include "vmm/counting/counting_choice.h"
#include "vmm/counting/kvm_stepping_backend.h"
#include "vmm/host/free_run.h"
#include "vmm/host/host_counters.h"
#include "vmm/host/skidding_counter_double.h"

namespace vmm {

class HostCounterBackend : public OverKvmStepping, private UnseenRun {
 public:
  // `kick_signal`: the signal the host counters' overflow sends the vCPU thread (its kick).
  HostCounterBackend(CountedVcpu& vcpu, GuestRam& ram, const pmu::cache::Geometry& cache,
                     const HostBackendChoice& choice, bool block_steps, bool trap_flag_steps,
                     int kick_signal);

  void before_run() override;
  void after_run(bool kicked, bool debug_exit) override;
  void settle() override { end_free_run(); }
  void log_closing_lines() const override;
  void print_stats(std::FILE* out, const ExitTally& exits) const override;

 private:
  // UnseenRun: the free run as the stepper sees it.
  bool active() const override { return free_run_.has_value(); }
  bool stepped() const override { return counter_double_ != nullptr; }
  uint64_t instructions_to_kick() const override { return counter_double_->instructions_to_kick(); }
  void count(const RetiredInstructions& retired) override;

  // Before a KVM_RUN: lets the vCPU run unseen up to the skid margin before the models' next
  // boundary, when they allow it (FreeRun), and arms its host counters.
  void arm_free_run();
  // The free run ends (a kick, an exit, the double's overflow, a pause): what the counters
  // counted goes to the models as one batch, before anything else can change their state.
  void end_free_run();
  // The counters' overflow came past the margin: the instructions past the boundary retire
  // late, at the vCPU's RIP now, and the vCPU is stepped from then on.
  void retire_past_boundary(const pmu::UnseenRetirements& past);

  CountedVcpu& vcpu_;
  HostBackendChoice choice_;
  std::unique_ptr<HostCounters> counters_;
  SkiddingCounterDouble* counter_double_ = nullptr;  // counters_, when it is the double
  std::optional<FreeRun> free_run_;  // armed: the guest runs unseen while the counters count
  bool fell_back_ = false;           // an overflow came past the skid margin: stepped from then on
  struct Stats {
    uint64_t free_runs = 0;
    uint64_t overflow_ends = 0;        // free runs ended by their counters' overflow
    uint64_t unseen_instructions = 0;  // CPL-3 instructions the models took in batches
    uint64_t steps_while_free = 0;     // the double's debug exits inside free runs (a host PMU
                                       // would not have them)
    uint64_t overshoots = 0;
  } stats_;
};

}  // namespace vmm
