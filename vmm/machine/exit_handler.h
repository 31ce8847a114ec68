// What one KVM exit of a vCPU does, as a function of the exit (the vCPU's kvm_run page), the
// vCPU (ExitContext), the port I/O bus and the guest kind, returning what the run loop does next
// (Firecracker's handle_kvm_exit). No KVM call is made here: the run loop owns the vCPU and
// KVM_RUN, and tests drive this with fake kvm_run pages (tests/machine/exit_handler_test.cc).
//
//   KVM_EXIT_IO            each element of a (string) access to the bus; a device's effect (the
//                          exit port, an i8042 reset, a console pause or panic) ends the access
//   KVM_EXIT_X86_RDMSR/WRMSR  the vCPU's PMU models and pmuvm's MSRs; refused: #GP
//   KVM_EXIT_DEBUG         the KVM stepper's stop
//   KVM_EXIT_MMIO          no device: reads float high; logged a few times per vCPU, then counted
//   KVM_EXIT_SHUTDOWN      a triple fault: the guest kind's reset, or a crash
//   KVM_EXIT_INTR/HLT      nothing (HLT: not expected with the in-kernel LAPIC, harmless)
//   anything else          the run fails, with the vCPU's registers and its last exits
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "vmm/devices/io_bus.h"
#include "vmm/kvm/kvm_abi.h"
#include "vmm/log_budget.h"
#include "vmm/machine/guest_kind.h"

namespace vmm {

// The vCPU whose exit it is, as the handler needs it.
class ExitContext {
 public:
  virtual ~ExitContext() = default;
  virtual uint32_t index() const = 0;
  // An RDMSR / WRMSR the MSR filter sent here: the value, or nullopt / false for a #GP.
  virtual std::optional<uint64_t> read_msr(uint32_t msr) = 0;
  virtual bool write_msr(uint32_t msr, uint64_t value) = 0;
  // A KVM_EXIT_DEBUG (the KVM stepper's breakpoint or single step).
  virtual void debug_exit() = 0;
  // A fatal exit's message: the vCPU's registers in one line (or why they cannot be read),
  // whether they are the reset state (KVM on AMD re-initialises the VMCB after a shutdown), and
  // the exits before it (vmm/kvm/exit_history.h).
  virtual std::string registers() = 0;
  virtual bool registers_are_reset_state() = 0;
  virtual std::string last_exits() = 0;
  // MMIO accesses where no device is: the guest decides how many, so a few are logged.
  virtual LogBudget& mmio_warnings() = 0;
};

RunEffect handle_exit(kvm_run& run, ExitContext& vcpu, const IoBus& bus, const GuestKind& kind);

}  // namespace vmm
