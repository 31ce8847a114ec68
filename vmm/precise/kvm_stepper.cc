#include "vmm/precise/kvm_stepper.h"

namespace vmm {

KvmStepper::KvmStepper(GuestRam& ram, const pmu::cache::Geometry& cache, uint64_t syscall_entry)
    : ram_(ram),
      user_code_(ram),
      kernel_code_(ram, PagedGuestMemory::ReadAccess::kSupervisor),
      user_accountant_(cache),
      kernel_accountant_(cache),
      user_(user_accountant_, user_code_, 3),
      kernel_(kernel_accountant_, kernel_code_, 0),
      syscall_entry_(syscall_entry) {}

void KvmStepper::on_user_step(const GuestRegisters& after, Retirements& out) {
  // The kernel's last instruction (IRETQ/SYSRET) retired into user mode, if its pre-state is
  // known (stepping may have started later).
  if (auto kernel = kernel_.step(after)) out.push_back(*kernel);
  kernel_.leave_user();
  // Back from the kernel: a pending SYSCALL retired if execution resumes right after it.
  auto user = in_user_ ? user_.step(after) : user_.enter_user(after);
  if (user) out.push_back(*user);
  in_user_ = true;
}

Retirements KvmStepper::on_step(const GuestRegisters& after, uint8_t cpl, uint64_t cr3) {
  user_code_.set_cr3(cr3);
  kernel_code_.set_cr3(cr3);
  Retirements out;
  if (cpl == 3) {
    ++user_steps_;
    on_user_step(after, out);
    return out;
  }
  ++kernel_steps_;
  if (in_user_) {
    // Left user mode with a step report. Hosts that deliver SYSCALL's single-step trap at the
    // entry point report it here; otherwise it is counted at the re-entry (enter_user).
    if (after.rip == syscall_entry_)
      if (auto syscall = user_.syscall_entered()) {
        out.push_back(*syscall);
        if (unannounced_kernel_) resume_rip_ = syscall->rip + 2;  // where SYSRET returns
      }
    in_user_ = false;
    kernel_.leave_user();
  }
  if (auto kernel = kernel_.step(after)) out.push_back(*kernel);
  return out;
}

Retirements KvmStepper::on_user_entry(uint64_t frame_gpa, const StepContext& ctx) {
  Retirements out;
  kernel_.leave_user();
  std::optional<GuestRegisters> resumed = read_user_trap_frame(ram_, frame_gpa, ctx);
  if (!resumed) {  // the kernel broke the protocol: nothing pending survives, step from CPL 3 on
    ++bad_frames_;
    user_.leave_user();
    in_user_ = false;
    resume_rip_.reset();
    return out;
  }
  user_code_.set_cr3(ctx.cr3);
  kernel_code_.set_cr3(ctx.cr3);
  if (auto syscall = user_.enter_user(*resumed)) out.push_back(*syscall);
  in_user_ = true;
  resume_rip_ = resumed->rip;
  return out;
}

void KvmStepper::on_user_arrival(const GuestRegisters& at) {
  ++user_entries_;
  user_.resume_at(at);
  in_user_ = true;  // other exits on the kernel's way out (MSRs, I/O) may have cleared it
  resume_rip_.reset();
}

Retirements KvmStepper::on_unannounced_return(const GuestRegisters& after) {
  user_code_.set_cr3(after.cr3);
  kernel_code_.set_cr3(after.cr3);
  ++user_steps_;
  Retirements out;
  kernel_.leave_user();
  resume_rip_.reset();  // user mode was reached, not where a return was expected
  if (auto r = user_.retired_unreported(after)) {
    ++unannounced_returns_;
    out.push_back(*r);
  }
  if (auto syscall = user_.enter_user(after)) out.push_back(*syscall);  // pending dropped or a SYSCALL
  in_user_ = true;
  return out;
}

Retirements KvmStepper::on_unannounced_syscall(const GuestRegisters& at_entry, uint64_t cr3) {
  user_code_.set_cr3(cr3);
  kernel_code_.set_cr3(cr3);
  Retirements out;
  kernel_.leave_user();
  in_user_ = false;
  resume_rip_.reset();
  if (auto syscall = user_.syscall_entered_unreported(at_entry.rcx, cr3)) {
    ++unannounced_returns_;
    out.push_back(*syscall);
    if (unannounced_kernel_) resume_rip_ = syscall->rip + 2;  // where SYSRET returns
  }
  return out;
}

Retirements KvmStepper::expect_user_entry(const GuestRegisters& user) {
  Retirements out;
  kernel_.leave_user();
  in_user_ = false;
  resume_rip_.reset();
  user_code_.set_cr3(user.cr3);
  if (auto syscall = user_.enter_user(user)) out.push_back(*syscall);
  return out;
}

bool KvmStepper::at_sysret(const GuestRegisters& at, uint64_t cr3) {
  kernel_code_.set_cr3(cr3);
  std::array<std::byte, 3> b{};
  if (!kernel_code_.read(at.rip, b)) return false;
  const auto u = [&](size_t i) { return std::to_integer<uint8_t>(b[i]); };
  const size_t op = (u(0) & 0xF0) == 0x40 ? 1 : 0;  // a REX prefix (48: SYSRETQ)
  return u(op) == 0x0F && u(op + 1) == 0x07;
}

bool KvmStepper::user_tf_may_be_clear() const {
  switch (user_accountant_.last_mnemonic()) {
    case ZYDIS_MNEMONIC_POPF:
    case ZYDIS_MNEMONIC_POPFD:
    case ZYDIS_MNEMONIC_POPFQ:
    case ZYDIS_MNEMONIC_IRET:
    case ZYDIS_MNEMONIC_IRETD:
    case ZYDIS_MNEMONIC_IRETQ:
    case ZYDIS_MNEMONIC_INVALID:
      return true;
    default:
      return false;
  }
}

void KvmStepper::on_other_exit(uint8_t cpl) {
  if (cpl != 3) in_user_ = false;
}

void KvmStepper::stop() {
  in_user_ = false;
  resume_rip_.reset();
  kernel_.leave_user();
}

}  // namespace vmm
