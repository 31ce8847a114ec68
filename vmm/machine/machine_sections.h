// The sections of a machine's state (a snapshot's state.bin, a migration's state message;
// vmm/snapshot/state_sections.h) and the objects each is saved from and loaded into: one table
// names each section once, with its save and its load, so what pmuvm writes is what it reads.
//
// No KVM here: KVM's own state travels as plain values (VmArchState, VcpuArchState) that the
// machine hands to KVM only after every section loaded (machine_state.cc). A state that does not
// fit is refused before any of it reaches the VM, and the whole load runs without KVM
// (tests/fuzz/machine_state_fuzz.cc loads states as a restore does).
//
//   vm.kvm                  VmArchState: interrupt controllers, PIT (Linux guests), clock
//   devices.serial/.cmos    the COM1 UART, the CMOS clock
//   devices.console         the console line printed so far
//   report.lwp              the LWP report (vmm/report/lwp_report.h)
//   report.linux_tasks      CR3 -> task number of a Linux guest's address spaces
//   vcpuN.kvm               VcpuArchState: registers, XSAVE, MSRs, LAPIC, events, debug registers
//   vcpuN.lwp               the LWP unit (pmu/lwp/save_area.h)
//   vcpuN.netburst          the NetBurst PMU (pmu/netburst/save_state.h), profiles with one
//   vcpuN.counts            VcpuCounts
//   vcpuN.interrupt_limit   the PMU interrupts' rate limiter
//   vcpuN.kvm_stepper       the KVM stepper (--stepper kvm, kvm-single; the host backend's too)
//   vcpuN.guest_stepper     the guest-assisted stepper (--stepper guest)
// (the last two saved and loaded by the counting backend: vmm/counting/)
#pragma once

#include <cstdint>
#include <map>

#include "pmu/rate_limited_interrupt_sink.h"
#include "vmm/cpu/guest_cpu.h"
#include "vmm/devices/guest_console.h"
#include "vmm/devices/port_devices.h"
#include "vmm/kvm/kvm_state.h"
#include "vmm/counting/counting_backend.h"
#include "vmm/report/lwp_report.h"
#include "vmm/snapshot/state_sections.h"
#include "vmm/vpmu/vcpu_pmu.h"
#include "vmm/machine/vcpu_counts.h"

namespace vmm {

// The machine's own sections: where each is saved from and loaded into.
struct MachineParts {
  VmArchState& kvm;
  SerialPort& serial;
  CmosPort& cmos;
  GuestConsole& console;
  LwpReport& report;
  std::map<uint64_t, uint32_t>& linux_tasks;
  bool has_pit;  // the guest kind's VM has a PIT (Linux guests): vm.kvm must hold its state
};

// One vCPU's sections. The counting backend saves and loads its own (a stepper's), which a state
// must then have.
struct VcpuParts {
  uint32_t index;
  VcpuArchState& kvm;
  VcpuPmu& pmu;
  VcpuCounts& counts;
  pmu::RateLimitedInterruptSink& interrupt_limit;
  CountingBackend& backend;
  const GuestCpu& cpu;  // what the loaded state must fit (its PMU models)
};

// Adds the sections to `s` (each component with its version).
void save_machine_sections(StateSections& s, const MachineParts& m);
void save_vcpu_sections(StateSections& s, const VcpuParts& v);

// Loads the sections from `s`; UsageError naming the section that is missing or does not fit
// (its element budget, the guest kind, the PMU models of the guest's CPU). On an error the objects
// may hold part of the state: the machine is not run then.
void load_machine_sections(const StateSections& s, const MachineParts& m);
void load_vcpu_sections(const StateSections& s, const VcpuParts& v);

}  // namespace vmm
