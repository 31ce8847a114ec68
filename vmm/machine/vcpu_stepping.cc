// The KVM stepper's side of the run loop (DESIGN §4.7): the step controller
// (vmm/precise/step_controller.h) decides; this file reads the vCPU for it, tells it about each
// exit, hands what retired to the PMU models, gives the guest the #DBs that are its own, and
// applies the KVM debug configuration the controller wants, only when it changes.
#include <spdlog/spdlog.h>

#include <optional>
#include <utility>

#include "vmm/machine/vcpu_runner.h"

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
  uint64_t tss_base() override { return sregs().tr.base; }
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

StepScope VcpuRunner::step_scope() const {
  const pmu::netburst::NetburstPmu* netburst = pmu_->netburst();
  if (netburst && netburst->wants_kernel_events()) return StepScope::kEveryCpl;
  if (pmu_->lwp().wants_events() || (netburst && netburst->wants_events()))
    return StepScope::kUserCode;
  return StepScope::kNothing;
}

uint64_t VcpuRunner::quiet_retirements() {
  uint64_t quiet = pmu_->lwp().quiet_retirements();
  if (const pmu::netburst::NetburstPmu* netburst = pmu_->netburst())
    quiet = std::min(quiet, netburst->quiet_retirements());
  if (const std::optional<uint64_t> to_pause = host_.progress().instructions_to_pause())
    quiet = std::min(quiet, *to_pause);
  return quiet;
}

void VcpuRunner::update_stepping() {
  VcpuStepTarget target(*kvm_);
  // A host PMU counts a free run: nothing is stepped until it ends (vcpu_host_backend.cc).
  const StepScope scope = running_unseen() ? StepScope::kNothing : step_scope();
  if (scope != kvm_stepper_->scope() || debug_unknown_) {
    kvm_stepper_->set_scope(scope, target);
    guest_debug_ = VcpuStepTarget::guest_debug_registers(*kvm_);
  }
  // A block ends where the PMU models would show something (a record, a PMI): they have counted
  // everything retired so far.
  if (kvm_stepper_->block_pending()) {
    VcpuStepTarget at(*kvm_, &guest_debug_);
    // In the double's free run a block ends where its overflow signal is due.
    const uint64_t limit =
        free_run_ ? counter_double_->instructions_to_kick() : quiet_retirements();
    if (kvm_stepper_->extend_block(limit, at)) kvm_->set_resume_flag();
  }
  const DebugConfig desired = kvm_stepper_->desired(guest_debug_);
  const bool unknown = std::exchange(debug_unknown_, false);
  if (desired == applied_debug_ && !unknown && !kvm_stepper_->must_rearm()) return;
  const bool was_stepping = applied_debug_.single_step;
  kvm_->set_guest_debug(to_kvm(desired));
  applied_debug_ = desired;
  // Ending KVM's single-step clears TF, also the guest's own (StepController::guest_trap_flag).
  if (was_stepping && !desired.single_step && kvm_stepper_->guest_trap_flag())
    kvm_->set_trap_flag();
}

void VcpuRunner::on_step() {
  const kvm_run* run = kvm_->run_state();
  VcpuStepTarget target(*kvm_);
  const uint8_t cpl = target.cpl();
  const GuestRegisters at = target.registers();
  const StepOutcome out = kvm_stepper_->on_debug_exit(target, run->debug.arch.dr6, applied_debug_);
  if (trace_steps_)
    spdlog::trace(
        "vCPU {}: debug exit at rip {:#x} CPL {} dr6 {:#x}: {} retired, mode {}{}", index(), at.rip,
        cpl, run->debug.arch.dr6, out.retired.size(), static_cast<int>(kvm_stepper_->mode()),
        out.deliver_debug ? fmt::format(", #DB for the guest ({:#x})", *out.deliver_debug) : "");
  if (out.deliver_debug) {
    const GuestDebugRegisters g = VcpuStepTarget::guest_debug_registers(*kvm_);
    if (!kvm_->inject_debug_exception(delivered_dr6(g.dr6, *out.deliver_debug)))
      if (const LogBudget::Verdict said = dropped_debug_warnings_.take();
          said != LogBudget::Verdict::kQuiet)
        spdlog::warn(
            "vCPU {}: the guest's #DB (DR6 bits {:#x}) met a pending exception and was "
            "dropped{}",
            index(), *out.deliver_debug, LogBudget::suffix(said));
  }
  if (out.entered_user) {
    pmu_->enter_user(at.cr3);  // completes a deferred LLWPCB before ring 3 (§5.3)
    // The kernel may have changed the guest's own breakpoints on its way (ptrace, perf).
    guest_debug_ = VcpuStepTarget::guest_debug_registers(*kvm_);
  }
  retire_all(out.retired, cpl, at.cr3);
  if (out.resume_flag) kvm_->set_resume_flag();
}

void VcpuRunner::other_exit() {
  VcpuStepTarget target(*kvm_);
  // A block that a fault ended inside retires its prefix at the first exit in the kernel.
  const StepOutcome out = kvm_stepper_->on_other_exit(target);
  if (!out.retired.empty()) retire_all(out.retired, target.cpl(), target.registers().cr3);
}

void VcpuRunner::kicked() {
  VcpuStepTarget target(*kvm_);
  const StepOutcome out = kvm_stepper_->on_kick(target);
  if (!out.retired.empty()) retire_all(out.retired, target.cpl(), target.registers().cr3);
  if (out.entered_user) {  // the stepper found user code it had lost and starts over there
    pmu_->enter_user(target.registers().cr3);
    guest_debug_ = VcpuStepTarget::guest_debug_registers(*kvm_);
  }
}

void VcpuRunner::interrupt_window(bool raised, bool kicked) {
  if (!kvm_stepper_->holds_interrupts()) {
    if (raised)
      spdlog::debug("vCPU {}: an interrupt was raised while interrupts are not held (mode {})",
                    index(), static_cast<int>(kvm_stepper_->mode()));
    holding_since_ns_ = 0;
    window_owed_ = false;
    return;
  }
  window_owed_ |= raised;
  // The clock is read every kExitsPerClockRead exits while nothing is owed: reading it at every
  // exit was a visible part of a step under QEMU's TCG (the nested host), and a window that
  // becomes due a few exits late changes no count. A kick (the release ticker's: no look for a
  // while) always looks.
  if (!window_owed_ && !kicked && holding_since_ns_ != 0 &&
      ++exits_without_clock_ < kExitsPerClockRead)
    return;
  exits_without_clock_ = 0;
  const uint64_t now = host_.clock().now_ns();
  if (holding_since_ns_ == 0) holding_since_ns_ = now;
  if (!window_owed_) {
    if (now - holding_since_ns_ < kInterruptWindowNs) return;
    // Held a while: a window only where something waits (each window costs an exit), and every
    // kForcedWindowNs regardless (an interrupt the LAPIC check does not see: the PIC's ExtINT).
    holding_since_ns_ = now;
    if (!kvm_->interrupt_pending() && now - last_window_ns_ < kForcedWindowNs) return;
  }
  VcpuStepTarget target(*kvm_, &guest_debug_);
  if (!kvm_stepper_->open_interrupt_window(target)) {  // at the next chance
    if (raised)
      spdlog::debug("vCPU {}: an interrupt was raised at rip {:#x} CPL {}; its window waits",
                    index(), target.registers().rip, target.cpl());
    return;
  }
  if (trace_steps_)
    spdlog::trace("vCPU {}: interrupt window ({})", index(),
                  window_owed_ ? "an interrupt was raised" : "interrupts held too long");
  window_owed_ = false;
  holding_since_ns_ = 0;
  last_window_ns_ = now;
}

void VcpuRunner::retire_all(const RetiredInstructions& retired, uint8_t cpl, uint64_t cr3) {
  if (free_run_) {  // the double's free run: it counts them, the models do not see them
    bool overflow = false;
    for (const pmu::RetiredInstruction& insn : retired) overflow |= counter_double_->count(insn);
    if (overflow) end_free_run();
    return;
  }
  for (size_t i = 0; i < retired.size(); ++i) {
    pmu_->retire(retired[i], cr3);
    if (retired[i].cpl == 3) count_instruction();
    const bool last = i + 1 == retired.size();
    deliver_page_fault([&](const VcpuPageFaults::Fault& f) {
      if (!last || cpl != 3 || !kvm_->inject_page_fault(f.linear, f.error_code)) return false;
      kvm_stepper_->on_exception_injected();  // into the kernel: no TF in its frame
      return true;
    });
  }
}

}  // namespace vmm
