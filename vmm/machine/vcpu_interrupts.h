// What the PMU models of one vCPU raise, on their way into the guest: PMIs and threshold
// interrupts to KVM (VcpuInterrupts) and the reporting tap in front of the rate limiter
// (RequestTap). Owned by the vCPU's runner. (LWP's #PF traps: vmm/vpmu/lwp_page_faults.h.)
#pragma once

#include <spdlog/spdlog.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>

#include "pmu/interrupt_sink.h"
#include "pmu/rate_limited_interrupt_sink.h"
#include "vmm/devices/lvt_performance_counter.h"
#include "vmm/kvm/kvm_vcpu.h"
#include "vmm/kvm/kvm_vm.h"
#include "vmm/log_budget.h"
#include "vmm/vmm_error.h"

namespace vmm {

// PMU interrupts of one vCPU. Threshold interrupts (LWP) are fixed-vector MSIs to its in-kernel
// LAPIC. A performance-counter interrupt (NetBurst overflow) goes where the guest programmed the
// LVT performance-counter entry: nothing while LVTPC is masked (it stays pending and is retried
// at every exit of the vCPU), NMI or the fixed vector by its delivery mode.
//
// Not modelled: Intel's mask-on-delivery (hardware sets LVTPC.mask when it delivers a PMI).
// KVM 6.1 has no ioctl that writes one LAPIC register; KVM_SET_LAPIC rewrites the whole state:
// it overwrites IRR bits raised since the KVM_GET_LAPIC (an IPI from another vCPU lost), restarts
// the timer from the saved count, and without APICv (this host) leaves an IRR bit it restores
// unnoticed until the next interrupt (KVM fixed that in 2024: "Refresh irr_pending on
// KVM_SET_LAPIC"; a stuck timer interrupt hangs a guest). Guests unmask LVTPC at the end of
// their PMI handler (Linux's P4 driver, the bundled kernel), so for them the only difference is
// that a second PMI could arrive inside the handler: NMIs are blocked there until IRET, and a
// fixed vector waits in IRR while IF = 0, so nothing nests in practice.
struct VcpuInterrupts : pmu::InterruptSink {
  KvmVm* vm = nullptr;
  KvmVcpu* vcpu = nullptr;
  uint32_t apic_id = 0;
  bool pmi_pending = false;
  uint64_t sent = 0;  // interrupts and NMIs handed to KVM (the stepper opens a window for them)
  // PMIs the guest's LVTPC cannot take (a delivery mode other than fixed or NMI): the guest
  // decides how many, so a few are logged and the rest counted (told at the end of the run).
  LogBudget undeliverable_pmis{8};

  void deliver_vector(uint8_t vector) override {
    vm->signal_msi(apic_id, vector);
    ++sent;
  }
  void deliver_nmi() override {
    vcpu->nmi();
    ++sent;
  }
  void raise_performance_interrupt() override {
    pmi_pending = true;
    deliver_pending_pmi();
  }
  void deliver_pending_pmi() {
    if (!pmi_pending) return;
    // A read: KVM_GET_LAPIC changes nothing.
    const PmiDelivery d = route_pmi(vcpu->lapic_register(kLvtpcOffset));
    switch (d.route) {
      case PmiDelivery::Route::kHeld: return;  // retried at the next exit
      case PmiDelivery::Route::kNmi: vcpu->nmi(), ++sent; break;
      case PmiDelivery::Route::kFixed: vm->signal_msi(apic_id, d.vector), ++sent; break;
      case PmiDelivery::Route::kUnsupported:
        if (const LogBudget::Verdict said = undeliverable_pmis.take();
            said != LogBudget::Verdict::kQuiet)
          spdlog::warn("vCPU {}: LVTPC delivery mode {} is not supported; PMI dropped{}",
                       vcpu->index(), d.delivery_mode, LogBudget::suffix(said));
        break;
    }
    pmi_pending = false;
  }
};

// What the PMU models of one vCPU raise, on its way to the rate limiter. A threshold vector is
// reported for the task running now (its LWPCB stored the record) together with whether the
// limiter folded it into an interrupt it already held. Counting at request time keeps a held
// interrupt that goes out later, while another task or the idle loop runs, with the task that
// asked for it, and makes "requested = delivered + coalesced" checkable per task.
struct RequestTap : pmu::InterruptSink {
  pmu::RateLimitedInterruptSink* limited = nullptr;
  std::function<void(bool coalesced)> on_vector;  // reporting hook (threshold interrupts per task)

  void deliver_vector(uint8_t vector) override {
    const uint64_t before = limited->coalesced();
    limited->deliver_vector(vector);
    if (on_vector) on_vector(limited->coalesced() != before);
  }
  void deliver_nmi() override { limited->deliver_nmi(); }
  void raise_performance_interrupt() override { limited->raise_performance_interrupt(); }
};

// The vCPU's registers in one line (or why they cannot be read): a fatal exit's message, and
// where each vCPU was when a signal stopped the run.
inline std::string describe_registers(KvmVcpu& vcpu) {
  char buf[512];
  try {
    const kvm_regs r = vcpu.regs();
    const kvm_sregs s = vcpu.sregs();
    std::snprintf(buf, sizeof buf,
                  "rip=%#llx rsp=%#llx rflags=%#llx rax=%#llx rbx=%#llx rcx=%#llx rdx=%#llx "
                  "rsi=%#llx rdi=%#llx cs=%#x cr0=%#llx cr2=%#llx cr3=%#llx cr4=%#llx efer=%#llx",
                  r.rip, r.rsp, r.rflags, r.rax, r.rbx, r.rcx, r.rdx, r.rsi, r.rdi, s.cs.selector,
                  s.cr0, s.cr2, s.cr3, s.cr4, s.efer);
  } catch (const VmmError& e) {
    return std::string("(registers unavailable: ") + e.what() + ")";
  }
  return buf;
}

}  // namespace vmm
