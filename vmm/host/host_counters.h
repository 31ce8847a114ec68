// The host backend's counters of one vCPU (DESIGN §4.11), as the run loop uses them: from arm()
// on they count the guest's retired CPL-3 instructions (and branches, when the run asks), and
// once a kind reaches its period they end the vCPU's KVM_RUN — later than that by the host
// PMU's skid. Two implementations: perf_event counters on the vCPU thread (a host with a PMU)
// and SkiddingCounterDouble (tests, and hosts without one), which counts what the precise
// stepper retires and ends the run a chosen number of instructions late.
#pragma once

#include "pmu/unseen_retirements.h"
#include "vmm/host/free_run.h"

namespace vmm {

class HostCounters {
 public:
  virtual ~HostCounters() = default;
  // Starts counting from 0 for `run` (its periods; see FreeRun).
  virtual void arm(const FreeRun& run) = 0;
  // Stops counting: what counted since arm() (branches: 0 unless the run counted them).
  virtual pmu::UnseenRetirements disarm() = 0;
};

}  // namespace vmm
