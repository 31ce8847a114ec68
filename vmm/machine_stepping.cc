// The KVM stepper's side of the run loop (DESIGN §4.7): before each KVM_RUN, whether the vCPU
// single-steps, runs free to a breakpoint or only intercepts #DB (update_stepping); at each debug
// exit, what retired (on_step); and the handing of retirements to the PMU models (retire_all).
#include <spdlog/spdlog.h>

#include <optional>
#include <utility>

#include "vmm/machine_impl.h"

namespace vmm {
namespace {

constexpr uint32_t kMsrLstar = 0xC0000082;
// Steps a Linux kernel path may take on its way to user mode after it started something that
// counts (KvmStepper, seeking) before the VMM gives up on it and lets it run free.
constexpr uint64_t kSeekStepLimit = 2'000'000;

}  // namespace

Machine::Impl::StepScope Machine::Impl::step_scope(const Vcpu& v) {
  const pmu::netburst::NetburstPmu* netburst = v.control->netburst();
  if (netburst && netburst->wants_kernel_events()) return StepScope::kEveryCpl;
  if (v.control->lwp().wants_events() || (netburst && netburst->wants_events()))
    return StepScope::kUserCode;
  return StepScope::kNothing;
}

void Machine::Impl::update_stepping(Vcpu& v) {
  const bool reissue = std::exchange(v.debug_unknown, false);
  const uint8_t cpl = v.kvm->exit_sregs().ss.dpl;
  const StepScope scope = step_scope(v);
  const bool every_cpl = scope == StepScope::kEveryCpl;
  const bool user_only = scope == StepScope::kUserCode;
  if (is_linux() && scope != StepScope::kNothing && !v.syscall_entry_known) {
    v.kvm_stepper->set_unannounced_kernel(v.kvm->msr(kMsrLstar));  // Linux set it at boot
    v.syscall_entry_known = true;
  }
  if (v.seeking && (!user_only || cpl == 3)) v.seeking = false;  // user mode reached, or moot
  if (cpl == 3) v.skip_syscall_bp = false;
  if (v.seeking && ++v.seek_steps > kSeekStepLimit) {
    spdlog::warn("vCPU {}: the guest kernel did not return to user mode within {} steps after "
                 "it started counting; it runs free (instructions until the next interrupt "
                 "are not counted)", v.kvm->index(), kSeekStepLimit);
    v.seeking = false;
  }
  if (v.seeking) {
    v.kvm->set_single_step(true, std::nullopt, /*block_irq=*/true);  // TF may be lost (IRET)
    v.stepping = true;
    v.step_breakpoint.reset();
    v.run_to.reset();
    v.intercepting = false;
    return;
  }
  const std::optional<uint64_t>& resume = v.kvm_stepper->resume_rip();
  if (user_only && cpl == 3 && resume) {
    // User mode was reached without passing the breakpoint (the kernel resumed elsewhere than
    // its frame said): stepping resumes here; what ran since was not counted.
    spdlog::warn("vCPU {}: user mode resumed at {:#x}, not at the announced {:#x}; instructions "
                 "in between were not counted", v.kvm->index(), v.kvm->exit_regs().rip, *resume);
    v.kvm_stepper->on_user_arrival(user_state(v));
  }
  if (every_cpl || (user_only && cpl == 3)) {
    // In user mode, a breakpoint on the SYSCALL entry point reports SYSCALL as it retires
    // (its single-step trap is not delivered: FMASK clears TF), so it counts with the PMU
    // state of that moment (a pmc_config that enables a counter must not count itself).
    const std::optional<uint64_t> bp =
        cpl == 3 ? std::optional<uint64_t>(v.kvm_stepper->syscall_entry()) : std::nullopt;
    if (reissue || !(v.stepping && v.tf_kept && v.step_breakpoint == bp))
      v.kvm->set_single_step(true, bp);
    v.step_breakpoint = bp;
    v.stepping = true;
    v.run_to.reset();
    v.intercepting = false;
    return;
  }
  // User mode left: nothing steps in the kernel (unless a return into the task was already
  // announced: an NMI handler's return reaches USER_ENTRY with no exit before it).
  if (v.stepping && !v.kvm_stepper->resume_rip()) v.kvm_stepper->stop();
  if (user_only && resume) {
    // Re-programmed when the announced RIP changes: a return can be announced, then another
    // task chosen (a tick on the way out) and announced in its turn.
    if (reissue || v.run_to != resume) v.kvm->set_single_step(false, resume);
    v.run_to = resume;
    v.intercepting = false;
  } else if (user_only) {
    // A profiled task is in the kernel and no return is announced yet (an NMI handler returns
    // without one): the frame it returns through carries the TF of its stepping. Linux: its
    // first instruction there may be a SYSCALL (an interrupt came just before one), which
    // raises no trap (FMASK clears TF): the breakpoint on the SYSCALL entry point stays.
    const std::optional<uint64_t> bp =
        is_linux() && !v.skip_syscall_bp ? std::optional<uint64_t>(v.kvm_stepper->syscall_entry())
                                         : std::nullopt;
    if (reissue || !v.intercepting || v.stepping || v.run_to || v.step_breakpoint != bp) {
      if (bp) v.kvm->set_single_step(false, bp);
      else v.kvm->intercept_debug_traps();
    }
    v.step_breakpoint = bp;
    v.intercepting = true;
    v.run_to.reset();
  } else if (is_linux() && (v.stepping || v.run_to || v.intercepting)) {
    // Nothing counts, but frames pushed while the task was stepped still carry TF: #DB stays
    // intercepted for good, and a stray trap clears TF (on_step).
    if (reissue || v.stepping || v.run_to || !v.intercepting || v.step_breakpoint)
      v.kvm->intercept_debug_traps();
    v.step_breakpoint.reset();
    v.run_to.reset();
    v.intercepting = true;
  } else if (v.stepping || v.run_to || v.intercepting) {
    v.kvm->set_single_step(false);
    v.run_to.reset();
    v.intercepting = false;
  }
  v.stepping = false;
}

GuestRegisters Machine::Impl::user_state(Vcpu& v) {
  const kvm_sregs s = v.kvm->exit_sregs();
  GuestRegisters g = general_registers(v.kvm->exit_regs());
  g.fs_base = s.fs.base, g.gs_base = s.gs.base;
  g.cr3 = s.cr3;
  return g;
}

void Machine::Impl::on_step(Vcpu& v) {
  const kvm_run* run = v.kvm->run_state();
  constexpr uint64_t kDr6Step = 1u << 14, kDr6Breakpoint0 = 1u << 0;
  if (v.kvm_stepper && v.run_to && (run->debug.arch.dr6 & kDr6Breakpoint0) &&
      v.kvm->exit_sregs().ss.dpl == 3) {
    v.kvm_stepper->on_user_arrival(user_state(v));  // user mode resumes: step from here
    if (trace_steps)
      spdlog::trace("vCPU {}: user mode resumes at the breakpoint", v.kvm->index());
    return;
  }
  if (v.kvm_stepper && (v.intercepting || (is_linux() && v.run_to)) &&
      (run->debug.arch.dr6 & kDr6Step) && v.kvm->exit_sregs().ss.dpl == 3) {
    // The unannounced return's TF trap: one user instruction ran since the kernel's IRETQ (with
    // Linux also where a SYSCALL's return was expected: a signal handler's sigreturn).
    const GuestRegisters g = user_state(v);
    if (trace_steps)
      spdlog::trace("vCPU {}: unannounced return, trap at rip {:#x}", v.kvm->index(), g.rip);
    if (const std::optional<uint64_t> r11 = std::exchange(v.sysret_r11, std::nullopt)) {
      kvm_regs r = v.kvm->regs();
      if (r.r11 == (*r11 | KvmVcpu::kTrapFlag)) {  // unless the instruction wrote R11 itself
        r.r11 = *r11;
        v.kvm->set_regs(r);
      }
    }
    retire_all(v, v.kvm_stepper->on_unannounced_return(g), 3, g.cr3);
    // Nothing counts any more: the TF the frame restored must not reach the guest's #DB.
    if (is_linux() && step_scope(v) == StepScope::kNothing) v.kvm->clear_trap_flag();
    return;
  }
  if (v.kvm_stepper && is_linux() && v.intercepting && (run->debug.arch.dr6 & kDr6Breakpoint0) &&
      v.kvm->exit_sregs().ss.dpl == 0) {
    // The SYSCALL entry point, reached by the first instruction after an unannounced return.
    const GuestRegisters g = user_state(v);
    if (trace_steps) spdlog::trace("vCPU {}: unannounced return, then SYSCALL", v.kvm->index());
    const Retirements retired = v.kvm_stepper->on_unannounced_syscall(g, g.cr3);
    v.skip_syscall_bp = retired.empty();
    retire_all(v, retired, 0, g.cr3);
    return;
  }
  if (is_linux() && !v.stepping && (run->debug.arch.dr6 & kDr6Step)) {
    // A TF restored from a frame of a stepped task, caught after nothing counts: pmuvm's, not
    // the guest's (which cannot single-step under pmuvm's #DB interception, README).
    v.kvm->clear_trap_flag();
    return;
  }
  if (!v.kvm_stepper || !v.stepping || !(run->debug.arch.dr6 & (kDr6Step | kDr6Breakpoint0))) {
    spdlog::warn("vCPU {}: debug exit that is not a pmuvm single step (exception {}, dr6 {:#x}, "
                 "rip {:#x}); ignored", v.kvm->index(), run->debug.arch.exception,
                 run->debug.arch.dr6, run->debug.arch.pc);
    return;
  }
  const kvm_sregs s = v.kvm->exit_sregs();
  const uint8_t cpl = s.ss.dpl;
  const GuestRegisters g = user_state(v);
  const Retirements retired = v.kvm_stepper->on_step(g, cpl, s.cr3);
  if (trace_steps)
    spdlog::trace("vCPU {}: step to rip {:#x} at CPL {} (dr6 {:#x}{}), {} retired{}",
                  v.kvm->index(), g.rip, cpl, run->debug.arch.dr6, v.seeking ? ", seeking" : "",
                  retired.size(),
                  retired.empty() ? ""
                                  : fmt::format(", last at {:#x}", retired[retired.size() - 1].rip));
  // The last retirement a user-mode one: the user accountant's last instruction is that one.
  v.tf_kept = cpl == 3 && (run->debug.arch.dr6 & kDr6Step) && !retired.empty() &&
              retired[retired.size() - 1].cpl == 3 && !v.kvm_stepper->user_tf_may_be_clear();
  retire_all(v, retired, cpl, s.cr3);
  if (v.seeking && cpl == 0 && v.kvm_stepper->at_sysret(g, s.cr3)) {
    // SYSRET's own step trap is not delivered (nested AMD host, like SYSCALL's). User mode
    // resumes in a state known now: RIP = RCX, RFLAGS = R11. TF goes into R11, so the first
    // user instruction traps as after an unannounced return and counts; R11 is restored there.
    GuestRegisters user = g;
    user.rip = g.rcx;
    user.rflags = g.r11;
    retire_all(v, v.kvm_stepper->expect_user_entry(user), 0, s.cr3);
    kvm_regs r = v.kvm->regs();
    v.sysret_r11 = r.r11;
    r.r11 |= KvmVcpu::kTrapFlag;
    v.kvm->set_regs(r);
    v.seeking = false;
  }
}

void Machine::Impl::retire_all(Vcpu& v, const Retirements& retired, uint8_t cpl, uint64_t cr3) {
  for (size_t i = 0; i < retired.size(); ++i) {
    v.control->retire(retired[i], cr3);
    if (retired[i].cpl == 3) count_instruction(v);
    const bool last = i + 1 == retired.size();
    deliver_page_fault(v, [&](const VcpuPageFaults::Fault& f) {
      return last && cpl == 3 && v.kvm->inject_page_fault(f.linear, f.error_code);
    });
  }
}

}  // namespace vmm
