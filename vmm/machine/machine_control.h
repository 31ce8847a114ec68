// What the API socket's adapter (machine_api.h) needs from a running Machine beyond snapshots
// and migration: its lifecycle (the user's pause), descriptions for vm.info / vm.pmu, ending the
// run, and being told that the VM now lives elsewhere. Machine::Impl implements it; the adapter
// never sees the run loop.
#pragma once

#include <nlohmann/json.hpp>

#include "vmm/machine/vm_lifecycle.h"
#include "vmm/result.h"
#include "vmm/snapshot/migratable_vm.h"

namespace vmm {

class MachineControl : public MigratableVm {
 public:
  // Running, paused by the user, ended (vm.pause, vm.resume).
  virtual VmLifecycle& lifecycle() = 0;
  // {"state": "running"|"paused"|"ended", "config": {...}} (vm.info)
  virtual nlohmann::json describe() = 0;
  // Per vCPU: LWP (LWPMSR0, LWPCB pointer, statistics) and NetBurst (counters, CCCRs, ESCRs)
  // state, read while the vCPUs are parked (vm.pmu).
  virtual nlohmann::json pmu_state() = 0;
  // vm.shutdown: the run ends with status 0. Error: it has ended already.
  virtual Status shut_down() = 0;
  // A migration handed the VM over (it is paused): the run ends with status 0 and no report.
  virtual void handed_over() = 0;
};

}  // namespace vmm
