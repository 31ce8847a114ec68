// The KVM stepper's side of the run loop (DESIGN §4.7): the step controller
// (vmm/precise/step_controller.h) decides; this file reads the vCPU for it, tells it about each
// exit, hands what retired to the PMU models, gives the guest the #DBs that are its own, and
// applies the KVM debug configuration the controller wants, only when it changes.
#include <spdlog/spdlog.h>

#include <optional>
#include <utility>

#include "vmm/machine_impl.h"

namespace vmm {
namespace {

constexpr uint32_t kMsrLstar = 0xC0000082;

// The vCPU at its current exit, as the step controller reads it.
class VcpuStepTarget : public StepTarget {
 public:
  // `guest`: the guest's debug registers as last read, where they are current (in user mode
  // they change only through the kernel, and they are read again at every return to user mode).
  explicit VcpuStepTarget(KvmVcpu& vcpu, const GuestDebugRegisters* guest = nullptr)
      : vcpu_(vcpu), guest_(guest) {}
  GuestRegisters registers() override {
    const kvm_sregs& s = sregs();
    GuestRegisters g = general_registers(vcpu_.exit_regs());
    g.fs_base = s.fs.base, g.gs_base = s.gs.base;
    g.cr3 = s.cr3;
    return g;
  }
  uint8_t cpl() override { return sregs().ss.dpl; }
  uint64_t lstar() override { return vcpu_.msr(kMsrLstar); }
  uint64_t idt_base() override { return sregs().idt.base; }
  uint16_t idt_limit() override { return sregs().idt.limit; }
  uint64_t cr4() override { return sregs().cr4; }
  GuestDebugRegisters guest_debug() override {
    return guest_ ? *guest_ : guest_debug_registers(vcpu_);
  }
  bool interrupt_pending() override { return vcpu_.interrupt_pending(); }

  static GuestDebugRegisters guest_debug_registers(KvmVcpu& vcpu) {
    const kvm_debugregs d = vcpu.debug_registers();
    GuestDebugRegisters g;
    for (int i = 0; i < 4; ++i) g.db[i] = d.db[i];
    g.dr6 = d.dr6;
    g.dr7 = d.dr7;
    return g;
  }

 private:
  const kvm_sregs& sregs() {
    if (!sregs_) sregs_ = vcpu_.exit_sregs();
    return *sregs_;
  }
  KvmVcpu& vcpu_;
  const GuestDebugRegisters* guest_;
  std::optional<kvm_sregs> sregs_;
};

kvm_guest_debug to_kvm(const DebugConfig& c) {
  kvm_guest_debug d{};
  if (c.intercept) d.control |= KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_USE_HW_BP;
  if (c.single_step) d.control |= KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_SINGLESTEP;
  if (c.block_irq) d.control |= KVM_GUESTDBG_BLOCKIRQ;
  for (int i = 0; i < 4; ++i) d.arch.debugreg[i] = c.address[i];
  d.arch.debugreg[7] = c.intercept ? c.dr7 : 0;
  return d;
}

}  // namespace

StepScope Machine::Impl::step_scope(const Vcpu& v) {
  const pmu::netburst::NetburstPmu* netburst = v.control->netburst();
  if (netburst && netburst->wants_kernel_events()) return StepScope::kEveryCpl;
  if (v.control->lwp().wants_events() || (netburst && netburst->wants_events()))
    return StepScope::kUserCode;
  return StepScope::kNothing;
}

uint64_t Machine::Impl::quiet_retirements(Vcpu& v) {
  uint64_t quiet = v.control->lwp().quiet_retirements();
  if (const pmu::netburst::NetburstPmu* netburst = v.control->netburst())
    quiet = std::min(quiet, netburst->quiet_retirements());
  if (const std::optional<uint64_t> to_pause = progress.instructions_to_pause())
    quiet = std::min(quiet, *to_pause);
  return quiet;
}

void Machine::Impl::update_stepping(Vcpu& v) {
  VcpuStepTarget target(*v.kvm);
  // A host PMU counts a free run: nothing is stepped until it ends (machine_host_backend.cc).
  const StepScope scope = running_unseen(v) ? StepScope::kNothing : step_scope(v);
  if (scope != v.kvm_stepper->scope() || v.debug_unknown) {
    v.kvm_stepper->set_scope(scope, target);
    v.guest_debug = VcpuStepTarget::guest_debug_registers(*v.kvm);
  }
  // A block ends where the PMU models would show something (a record, a PMI): they have counted
  // everything retired so far.
  if (v.kvm_stepper->block_pending()) {
    VcpuStepTarget at(*v.kvm, &v.guest_debug);
    // In the double's free run a block ends where its overflow signal is due.
    const uint64_t limit =
        v.free_run ? v.counter_double->instructions_to_kick() : quiet_retirements(v);
    if (v.kvm_stepper->extend_block(limit, at)) v.kvm->set_resume_flag();
  }
  const DebugConfig desired = v.kvm_stepper->desired(v.guest_debug);
  const bool unknown = std::exchange(v.debug_unknown, false);
  if (desired == v.applied_debug && !unknown && !v.kvm_stepper->must_rearm()) return;
  const bool was_stepping = v.applied_debug.single_step;
  v.kvm->set_guest_debug(to_kvm(desired));
  v.applied_debug = desired;
  // Ending KVM's single-step clears TF, also the guest's own (StepController::guest_trap_flag).
  if (was_stepping && !desired.single_step && v.kvm_stepper->guest_trap_flag())
    v.kvm->set_trap_flag();
}

void Machine::Impl::on_step(Vcpu& v) {
  const kvm_run* run = v.kvm->run_state();
  VcpuStepTarget target(*v.kvm);
  const uint8_t cpl = target.cpl();
  const GuestRegisters at = target.registers();
  const StepOutcome out = v.kvm_stepper->on_debug_exit(target, run->debug.arch.dr6, v.applied_debug);
  if (trace_steps)
    spdlog::trace("vCPU {}: debug exit at rip {:#x} CPL {} dr6 {:#x}: {} retired, mode {}{}",
                  v.kvm->index(), at.rip, cpl, run->debug.arch.dr6, out.retired.size(),
                  static_cast<int>(v.kvm_stepper->mode()),
                  out.deliver_debug ? fmt::format(", #DB for the guest ({:#x})", *out.deliver_debug) : "");
  if (out.deliver_debug) {
    const GuestDebugRegisters g = VcpuStepTarget::guest_debug_registers(*v.kvm);
    if (!v.kvm->inject_debug_exception(delivered_dr6(g.dr6, *out.deliver_debug)))
      if (const LogBudget::Verdict said = v.dropped_debug_warnings.take();
          said != LogBudget::Verdict::kQuiet)
        spdlog::warn(
            "vCPU {}: the guest's #DB (DR6 bits {:#x}) met a pending exception and was "
            "dropped{}",
            v.kvm->index(), *out.deliver_debug, LogBudget::suffix(said));
  }
  if (out.entered_user) {
    v.control->enter_user(at.cr3);  // completes a deferred LLWPCB before ring 3 (§5.3)
    // The kernel may have changed the guest's own breakpoints on its way (ptrace, perf).
    v.guest_debug = VcpuStepTarget::guest_debug_registers(*v.kvm);
  }
  retire_all(v, out.retired, cpl, at.cr3);
  if (out.resume_flag) v.kvm->set_resume_flag();
}

void Machine::Impl::other_exit(Vcpu& v) {
  VcpuStepTarget target(*v.kvm);
  v.kvm_stepper->on_other_exit(target);
}

void Machine::Impl::kicked(Vcpu& v) {
  VcpuStepTarget target(*v.kvm);
  v.kvm_stepper->on_kick(target);
}

void Machine::Impl::interrupt_window(Vcpu& v, bool raised, bool kicked) {
  if (!v.kvm_stepper->holds_interrupts()) {
    if (raised)
      spdlog::debug("vCPU {}: an interrupt was raised while interrupts are not held (mode {})",
                    v.kvm->index(), static_cast<int>(v.kvm_stepper->mode()));
    v.holding_since_ns = 0;
    v.window_owed = false;
    return;
  }
  v.window_owed |= raised;
  // The clock is read every kExitsPerClockRead exits while nothing is owed: reading it at every
  // exit was a visible part of a step under QEMU's TCG (the nested host), and a window that
  // becomes due a few exits late changes no count. A kick (the release ticker's: no look for a
  // while) always looks.
  if (!v.window_owed && !kicked && v.holding_since_ns != 0 &&
      ++v.exits_without_clock < kExitsPerClockRead)
    return;
  v.exits_without_clock = 0;
  const uint64_t now = clock.now_ns();
  if (v.holding_since_ns == 0) v.holding_since_ns = now;
  if (!v.window_owed) {
    if (now - v.holding_since_ns < kInterruptWindowNs) return;
    // Held a while: a window only where something waits (each window costs an exit), and every
    // kForcedWindowNs regardless (an interrupt the LAPIC check does not see: the PIC's ExtINT).
    v.holding_since_ns = now;
    if (!v.kvm->interrupt_pending() && now - v.last_window_ns < kForcedWindowNs) return;
  }
  VcpuStepTarget target(*v.kvm, &v.guest_debug);
  if (!v.kvm_stepper->open_interrupt_window(target)) {  // at the next chance
    if (raised)
      spdlog::debug("vCPU {}: an interrupt was raised at rip {:#x} CPL {}; its window waits",
                    v.kvm->index(), target.registers().rip, target.cpl());
    return;
  }
  if (trace_steps)
    spdlog::trace("vCPU {}: interrupt window ({})", v.kvm->index(),
                  v.window_owed ? "an interrupt was raised" : "interrupts held too long");
  v.window_owed = false;
  v.holding_since_ns = 0;
  v.last_window_ns = now;
}

void Machine::Impl::retire_all(Vcpu& v, const RetiredInstructions& retired,
                               uint8_t cpl, uint64_t cr3) {
  if (v.free_run) {  // the double's free run: it counts them, the models do not see them
    bool overflow = false;
    for (const pmu::RetiredInstruction& insn : retired) overflow |= v.counter_double->count(insn);
    if (overflow) end_free_run(v);
    return;
  }
  for (size_t i = 0; i < retired.size(); ++i) {
    v.control->retire(retired[i], cr3);
    if (retired[i].cpl == 3) count_instruction(v);
    const bool last = i + 1 == retired.size();
    deliver_page_fault(v, [&](const VcpuPageFaults::Fault& f) {
      if (!last || cpl != 3 || !v.kvm->inject_page_fault(f.linear, f.error_code)) return false;
      v.kvm_stepper->on_exception_injected();  // into the kernel: no TF in its frame
      return true;
    });
  }
}

}  // namespace vmm
