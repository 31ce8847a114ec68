#include "vmm/counting/kvm_stepping_backend.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "vmm/snapshot/state_components.h"

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

StepScope step_scope(VcpuPmu& pmu) {
  if (pmu.wants_kernel_events()) return StepScope::kEveryCpl;
  if (pmu.wants_events()) return StepScope::kUserCode;
  return StepScope::kNothing;
}

uint64_t quiet_retirements(CountedVcpu& vcpu) {
  uint64_t quiet = vcpu.pmu().quiet_retirements();
  if (const std::optional<uint64_t> to_pause = vcpu.instructions_to_pause())
    quiet = std::min(quiet, *to_pause);
  return quiet;
}

KvmSteppingBackend::KvmSteppingBackend(CountedVcpu& vcpu, GuestRam& ram,
                                       const pmu::cache::Geometry& cache, bool block_steps,
                                       bool trap_flag_steps, UnseenRun* unseen)
    : vcpu_(vcpu),
      stepper_(
          ram, cache,
          StepController::Options{.trap_flag_steps = trap_flag_steps, .block_steps = block_steps}),
      unseen_(unseen) {
  stepper_.set_model_demand(model_demand_of(vcpu.pmu()));
}

void KvmSteppingBackend::before_run() { update_stepping(); }

void KvmSteppingBackend::update_stepping() {
  KvmVcpu& kvm = vcpu_.kvm();
  VcpuStepTarget target(kvm);
  // A host PMU counts a free run: nothing is stepped until it ends (host_counter_backend.cc).
  const bool unseen = unseen_ && unseen_->active() && !unseen_->stepped();
  const StepScope scope = unseen ? StepScope::kNothing : step_scope(vcpu_.pmu());
  if (scope != stepper_.scope() || debug_unknown_) {
    stepper_.set_scope(scope, target);
    guest_debug_ = VcpuStepTarget::guest_debug_registers(kvm);
  }
  // A block ends where the PMU models would show something (a record, a PMI): they have counted
  // everything retired so far.
  if (stepper_.block_pending()) {
    VcpuStepTarget at(kvm, &guest_debug_);
    // In the double's free run a block ends where its overflow signal is due.
    const uint64_t limit =
        unseen_ && unseen_->active() ? unseen_->instructions_to_kick() : quiet_retirements(vcpu_);
    if (stepper_.extend_block(limit, at)) kvm.set_resume_flag();
  }
  const DebugConfig desired = stepper_.desired(guest_debug_);
  const bool unknown = std::exchange(debug_unknown_, false);
  if (desired == applied_debug_ && !unknown && !stepper_.must_rearm()) return;
  const bool was_stepping = applied_debug_.single_step;
  kvm.set_guest_debug(to_kvm(desired));
  applied_debug_ = desired;
  // Ending KVM's single-step clears TF, also the guest's own (StepController::guest_trap_flag).
  if (was_stepping && !desired.single_step && stepper_.guest_trap_flag()) kvm.set_trap_flag();
}

void KvmSteppingBackend::on_debug_exit() {
  KvmVcpu& kvm = vcpu_.kvm();
  const kvm_run* run = kvm.run_state();
  VcpuStepTarget target(kvm);
  const uint8_t cpl = target.cpl();
  const GuestRegisters at = target.registers();
  const StepOutcome out = stepper_.on_debug_exit(target, run->debug.arch.dr6, applied_debug_);
  if (trace_steps_)
    spdlog::trace(
        "vCPU {}: debug exit at rip {:#x} CPL {} dr6 {:#x}: {} retired, mode {}{}", vcpu_.index(),
        at.rip, cpl, run->debug.arch.dr6, out.retired.size(), static_cast<int>(stepper_.mode()),
        out.deliver_debug ? fmt::format(", #DB for the guest ({:#x})", *out.deliver_debug) : "");
  if (out.deliver_debug) {
    const GuestDebugRegisters g = VcpuStepTarget::guest_debug_registers(kvm);
    if (!kvm.inject_debug_exception(delivered_dr6(g.dr6, *out.deliver_debug)))
      if (const LogBudget::Verdict said = dropped_debug_warnings_.take();
          said != LogBudget::Verdict::kQuiet)
        spdlog::warn(
            "vCPU {}: the guest's #DB (DR6 bits {:#x}) met a pending exception and was "
            "dropped{}",
            vcpu_.index(), *out.deliver_debug, LogBudget::suffix(said));
  }
  if (out.entered_user) {
    vcpu_.pmu().enter_user(at.cr3);  // completes a deferred LLWPCB before ring 3 (§5.3)
    // The kernel may have changed the guest's own breakpoints on its way (ptrace, perf).
    guest_debug_ = VcpuStepTarget::guest_debug_registers(kvm);
  }
  retire_all(out.retired, cpl, at.cr3);
  if (out.resume_flag) kvm.set_resume_flag();
}

void KvmSteppingBackend::after_run(bool kicked, bool debug_exit) {
  KvmVcpu& kvm = vcpu_.kvm();
  VcpuStepTarget target(kvm);
  if (kicked) {  // between instructions: nothing retired
    const StepOutcome out = stepper_.on_kick(target);
    if (!out.retired.empty()) retire_all(out.retired, target.cpl(), target.registers().cr3);
    if (out.entered_user) {  // the stepper found user code it had lost and starts over there
      vcpu_.pmu().enter_user(target.registers().cr3);
      guest_debug_ = VcpuStepTarget::guest_debug_registers(kvm);
    }
    return;
  }
  if (debug_exit) return;  // on_debug_exit, from the exit handler
  // Any other exit (nothing retired; where the vCPU is may still tell the stepper something). A
  // block that a fault ended inside retires its prefix at the first exit in the kernel.
  const StepOutcome out = stepper_.on_other_exit(target);
  if (!out.retired.empty()) retire_all(out.retired, target.cpl(), target.registers().cr3);
}

void KvmSteppingBackend::after_exit(bool raised, bool kicked) { interrupt_window(raised, kicked); }

void KvmSteppingBackend::interrupt_window(bool raised, bool kicked) {
  if (!stepper_.holds_interrupts()) {
    if (raised)
      spdlog::debug("vCPU {}: an interrupt was raised while interrupts are not held (mode {})",
                    vcpu_.index(), static_cast<int>(stepper_.mode()));
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
  const uint64_t now = vcpu_.clock().now_ns();
  if (holding_since_ns_ == 0) holding_since_ns_ = now;
  if (!window_owed_) {
    if (now - holding_since_ns_ < kInterruptWindowNs) return;
    // Held a while: a window only where something waits (each window costs an exit), and every
    // kForcedWindowNs regardless (an interrupt the LAPIC check does not see: the PIC's ExtINT).
    holding_since_ns_ = now;
    if (!vcpu_.kvm().interrupt_pending() && now - last_window_ns_ < kForcedWindowNs) return;
  }
  VcpuStepTarget target(vcpu_.kvm(), &guest_debug_);
  if (!stepper_.open_interrupt_window(target)) {  // at the next chance
    if (raised)
      spdlog::debug("vCPU {}: an interrupt was raised at rip {:#x} CPL {}; its window waits",
                    vcpu_.index(), target.registers().rip, target.cpl());
    return;
  }
  if (trace_steps_)
    spdlog::trace("vCPU {}: interrupt window ({})", vcpu_.index(),
                  window_owed_ ? "an interrupt was raised" : "interrupts held too long");
  window_owed_ = false;
  holding_since_ns_ = 0;
  last_window_ns_ = now;
}

void KvmSteppingBackend::retire_all(const RetiredInstructions& retired, uint8_t cpl, uint64_t cr3) {
  if (unseen_ && unseen_->active()) {  // the double's free run: it counts them, not the models
    unseen_->count(retired);
    return;
  }
  for (size_t i = 0; i < retired.size(); ++i) {
    vcpu_.pmu().retire(retired[i], cr3);
    if (retired[i].cpl == 3) vcpu_.add_counted(1);
    const bool last = i + 1 == retired.size();
    vcpu_.page_faults().deliver(vcpu_.index(), [&](const LwpPageFaults::Fault& f) {
      if (!last || cpl != 3 || !vcpu_.kvm().inject_page_fault(f.linear, f.error_code)) return false;
      stepper_.on_exception_injected();  // into the kernel: no TF in its frame
      return true;
    });
  }
}

void KvmSteppingBackend::save_state(StateSections& s, const std::string& prefix) {
  s.add_component(prefix + "kvm_stepper", StepController::kStateVersion, archived(stepper_));
}

void KvmSteppingBackend::load_state(const StateSections& s, const std::string& prefix) {
  read_component(s, prefix + "kvm_stepper", StepController::kStateVersion, stepper_);
  debug_unknown_ = true;
}

void KvmSteppingBackend::log_closing_lines() const {
  // What stepping cost: steps per counted instruction (bench/, docs/stepping.md).
  const StepController::Stats& st = stepper_.stats();
  spdlog::info(
      "vCPU {}: KVM stepper: {} user instructions at their successor breakpoint, {} "
      "single-stepped, {} kernel instructions stepped, {} stops at kernel return "
      "sites ({} into counted user mode), {} #DBs handed back to the guest, {} CPL-3 "
      "instructions counted",
      vcpu_.index(), st.user_steps, st.single_steps, st.kernel_steps, st.return_stops,
      st.user_returns, st.guest_debug_exceptions, vcpu_.counted());
  if (st.missed_returns)
    spdlog::warn(
        "vCPU {}: {} time(s) user mode was found running past every watched kernel "
        "return site: instructions in between were not counted",
        vcpu_.index(), st.missed_returns);
}

CountingBackend::Steps KvmSteppingBackend::steps() const {
  // Stops that each counted one instruction (a successor breakpoint or a single-step trap),
  // and stops that counted a block of several (DESIGN §4.7, block stepping).
  const StepController::Stats& st = stepper_.stats();
  return {.single = st.user_steps + st.single_steps + st.kernel_steps, .blocks = st.blocks};
}

void KvmSteppingBackend::print_stats(std::FILE* out, const ExitTally& exits) const {
  // Where the exits went (bench/stepper_bench, and why a run costs what it costs).
  const StepController::Stats& st = stepper_.stats();
  auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  std::fprintf(out,
               "pmuvm: vcpu%u: exits by kind: debug %llu, I/O %llu, MSR %llu, other %llu; "
               "stepper: user steps %llu, single steps %llu, kernel steps %llu, return stops "
               "%llu (%llu into counted user mode), interrupt windows %llu, guest #DBs %llu, "
               "missed returns %llu; blocks %llu of %llu instructions, blocks refused for "
               "lack of debug slots %llu, blocks a fault ended inside %llu\n",
               vcpu_.index(), u(exits.debug), u(exits.io), u(exits.msr),
               u(exits.all - exits.debug - exits.io - exits.msr), u(st.user_steps),
               u(st.single_steps), u(st.kernel_steps), u(st.return_stops), u(st.user_returns),
               u(st.interrupt_windows), u(st.guest_debug_exceptions), u(st.missed_returns),
               u(st.blocks), u(st.block_instructions), u(st.blocks_refused_for_slots),
               u(st.blocks_left_by_faults));
}

}  // namespace vmm
