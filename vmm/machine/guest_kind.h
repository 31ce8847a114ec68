// What differs between the two kinds of guest pmuvm runs (DESIGN §4.9), asked of one policy
// object instead of "is it Linux?" throughout the machine:
//   the bundled kernel   loaded from ELF with its programs; every vCPU starts at its entry; no
//                        PIT; a triple fault is a crash
//   Linux                a bzImage by the 64-bit boot protocol; the application processors wait
//                        for INIT/SIPI; a PIT and COM1's IRQ; its panic line and its reboot
//                        (triple fault) end the run; tasks are told apart by address space
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "vmm/boot/long_mode.h"
#include "vmm/kvm/kvm_vcpu.h"
#include "vmm/cpu/guest_cpu.h"
#include "vmm/machine/machine_options.h"
#include "vmm/memory/guest_ram.h"
#include "vmm/result.h"

namespace vmm {

class GuestKind {
 public:
  virtual ~GuestKind() = default;

  // As a snapshot's manifest and vm.info name it.
  virtual bool linux_guest() const = 0;
  virtual const char* name() const = 0;  // "bundled" or "linux"

  // The page tables and descriptor tables the guest enters 64-bit mode with.
  virtual LongModeState set_up_long_mode(GuestRam& ram) const = 0;
  // The registers vCPU `index` boots with (after set_up_long_mode; not for a restored VM).
  virtual void set_boot_registers(KvmVcpu& vcpu, uint32_t index,
                                  const LongModeState& boot) const = 0;
  // The VM has an in-kernel PIT and COM1 drives IRQ4 (Linux calibrates its clocks against the
  // PIT and takes console interrupts); the PIT's state is part of a snapshot then.
  virtual bool has_pit() const = 0;
  // A completed console line that ends the run as a failure: its reason, else nullopt.
  virtual std::optional<std::string> panic_reason(std::string_view line) const = 0;
  // A triple fault is the guest's reset (the run ends with status 0), not a crash.
  virtual bool triple_fault_is_reset() const = 0;
  // The guest names no tasks (PMUVM_MSR_TASK): the report tells them apart by the address space
  // that loads an LWPCB.
  virtual bool tasks_by_address_space() const = 0;
};

// Loads the guest `options` describe into `ram` (RAM untouched when it fails: a usage error), for
// the CPU `cpu` (its signature for Linux; the PV features the bundled kernel is offered).
Result<std::unique_ptr<GuestKind>> load_guest_kind(const MachineOptions& options,
                                                   const GuestCpu& cpu, GuestRam& ram);
// The kind of a VM resumed from a snapshot or a migration (nothing is loaded: RAM comes with it).
std::unique_ptr<GuestKind> restored_guest_kind(bool linux_guest);

}  // namespace vmm
