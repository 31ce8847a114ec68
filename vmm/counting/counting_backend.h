// A vCPU's counting backend (DESIGN §4.7, §4.11): what hands the instructions the guest retires to
// the vCPU's PMU models. The vCPU's runner (vmm/machine/vcpu_runner.h) holds one and calls it at
// fixed points of its KVM_RUN loop, never asking which one it is:
//
//   loop:  before_run()                      unless the vCPU is about to park
//          KVM_RUN
//          after_run(kicked, debug_exit)     before the exit is handled
//          [the exit handler: on_debug_exit(), user_entry(), step_reported() from guest MSRs]
//          after_exit(raised, kicked)        after it, with whether the models raised an interrupt
//   park:  settle()                          before the vCPU parks and when the run ends
//
// Implementations: the KVM stepper, block and single (kvm_stepping_backend.h), the
// guest-assisted stepper (guest_assisted_backend.h), the host counters over the KVM stepper
// (host_counter_backend.h) and no counting (a manifest's "none"). make_counting_backend.h builds
// the one a CountingChoice names.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>

#include "pmu/clock.h"
#include "vmm/kvm/kvm_vcpu.h"
#include "vmm/precise/step_accountant.h"
#include "vmm/snapshot/state_sections.h"
#include "vmm/vpmu/lwp_page_faults.h"
#include "vmm/vpmu/vcpu_pmu.h"

namespace vmm {

// The vCPU a backend counts on: KVM's side of it, its PMU models and their #PF traps, and the
// runner's tally of counted instructions (which also drives --pause-at-instructions).
class CountedVcpu {
 public:
  virtual ~CountedVcpu() = default;
  virtual uint32_t index() const = 0;
  virtual KvmVcpu& kvm() = 0;
  virtual VcpuPmu& pmu() = 0;
  virtual LwpPageFaults& page_faults() = 0;
  virtual pmu::Clock& clock() = 0;
  // `n` more CPL-3 instructions were handed to the models.
  virtual void add_counted(uint64_t n) = 0;
  // CPL-3 instructions handed to the models so far (the log's closing lines).
  virtual uint64_t counted() const = 0;
  // Instructions left to a --pause-at-instructions point (nullopt: none).
  virtual std::optional<uint64_t> instructions_to_pause() = 0;
};

// What the steppers' cache model and branch predictor must see while `pmu`'s enabled events read
// them (StepAccountant::set_model_demand): a VM that profiles only instructions and branches leaves
// the cache model empty.
std::function<StepAccountant::ModelDemand()> model_demand_of(VcpuPmu& pmu);

// The run loop's exits by kind, for --stats: each exit's reason is looked at once, here.
struct ExitTally {
  enum Kind { kNoExit, kDebug, kIo, kMsr, kOther };
  uint64_t all = 0;
  uint64_t debug = 0;  // KVM_EXIT_DEBUG: the KVM stepper's stops
  uint64_t io = 0;     // port I/O and MMIO
  uint64_t msr = 0;    // RDMSR/WRMSR

  // Counts the exit `run` describes; returns its kind.
  Kind add(const kvm_run& run) {
    ++all;
    switch (run.exit_reason) {
      case KVM_EXIT_DEBUG: ++debug; return kDebug;
      case KVM_EXIT_IO:
      case KVM_EXIT_MMIO: ++io; return kIo;
      case KVM_EXIT_X86_RDMSR:
      case KVM_EXIT_X86_WRMSR: ++msr; return kMsr;
      default: return kOther;
    }
  }
};

class CountingBackend {
 public:
  virtual ~CountingBackend() = default;

  // Before a KVM_RUN that may run guest code: what must count during it is armed.
  virtual void before_run() {}
  // KVM_RUN returned, before its exit is handled: a kick (`kicked`: nothing retired) or an exit,
  // KVM_EXIT_DEBUG (`debug_exit`: on_debug_exit follows) or another.
  virtual void after_run(bool /*kicked*/, bool /*debug_exit*/) {}
  // KVM_EXIT_DEBUG: only a backend that asked KVM for debug exits gets one.
  virtual void on_debug_exit();
  // The bundled kernel's PMUVM_MSR_USER_ENTRY (guest/abi/pmuvm_abi.h), after the PMU models were
  // told that user mode is entered with `sregs`.
  virtual void user_entry(uint64_t /*value*/, const kvm_sregs& /*sregs*/) {}
  // The bundled kernel's PMUVM_MSR_STEP: false when this backend offers no such MSR (#GP).
  virtual bool step_reported(uint64_t /*value*/, const kvm_sregs& /*sregs*/) { return false; }
  // The exit was handled: `raised` when the PMU models raised an interrupt meanwhile.
  virtual void after_exit(bool /*raised*/, bool /*kicked*/) {}
  // Everything counted is with the models: before the vCPU parks (a snapshot saves them) and
  // when the run ends.
  virtual void settle() {}

  // Since when this backend holds the guest's interrupts (steady clock; 0: it does not): the
  // machine's release ticker kicks a vCPU that held them too long without an exit.
  virtual uint64_t holding_since_ns() const { return 0; }

  // Its state sections, named `prefix` + its own part ("vcpuN." + "kvm_stepper"). load_state: a
  // restore, before KVM has the vCPU's state; UsageError naming a section that is missing or
  // does not fit. After it, KVM holds none of the debug state the backend's own describes.
  virtual void save_state(StateSections& /*s*/, const std::string& /*prefix*/) {}
  virtual void load_state(const StateSections& /*s*/, const std::string& /*prefix*/) {}

  // What this backend did, in the log at the end of the run (info lines, warnings).
  virtual void log_closing_lines() const {}
  // --stats: single steps and blocks (the first line's figures), then its own lines.
  struct Steps {
    uint64_t single = 0;  // stops that each counted one instruction
    uint64_t blocks = 0;  // stops that counted a block of several
  };
  virtual Steps steps() const { return {}; }
  virtual void print_stats(std::FILE* /*out*/, const ExitTally& /*exits*/) const {}
};

}  // namespace vmm
