// What a vCPU's runner (vmm/machine/vcpu_runner.h) needs from the machine it belongs to: the
// options, the guest's CPU, the clock, the devices and the guest kind, the progress points, the
// VM's life (stop, pause, park) and the report. Machine::Impl implements it; a runner sees nothing
// else of it.
#pragma once

#include <cstdint>
#include <string>

#include "pmu/clock.h"
#include "vmm/cpu/guest_cpu.h"
#include "vmm/devices/io_bus.h"
#include "vmm/machine/guest_kind.h"
#include "vmm/machine/machine_options.h"
#include "vmm/progress_pauses.h"

namespace vmm {

class VcpuHost {
 public:
  virtual ~VcpuHost() = default;
  virtual const MachineOptions& options() const = 0;
  virtual const GuestCpu& guest_cpu() const = 0;  // with its CPUID table (the vCPUs are built)
  virtual pmu::Clock& clock() = 0;
  virtual const IoBus& io_bus() const = 0;
  virtual const GuestKind& guest_kind() const = 0;
  virtual ProgressPauses& progress() = 0;

  // The run ends: with the guest's `status`, or failed (status 3) with `reason`.
  virtual void finish(int status) = 0;
  virtual void fail(const std::string& reason) = 0;
  virtual bool stopping() const = 0;
  // Every vCPU is asked to park between instructions (a pause, a snapshot, a migration).
  virtual bool pause_requested() const = 0;
  // vCPU `index`'s thread waits here while a pause is requested (or until the run ends).
  virtual void park(uint32_t index) = 0;
  // A progress point was reached: the whole VM pauses, as for vm.pause (called on a vCPU thread,
  // which parks at the top of its loop).
  virtual void pause_at_progress(const std::string& reason) = 0;
  // The report's task number of the address space at `cr3` (guests that name no tasks).
  virtual uint32_t task_of_address_space(uint64_t cr3) = 0;
  // One KVM exit of vCPU `index` (--debug-pause-every counts vCPU 0's).
  virtual void exit_taken(uint32_t index) = 0;
};

}  // namespace vmm
