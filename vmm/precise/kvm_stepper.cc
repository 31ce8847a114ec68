#include "vmm/precise/kvm_stepper.h"

#include <span>

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

std::optional<GuestRegisters> KvmStepper::iret_return_state(const GuestRegisters& after) {
  const std::optional<GuestRegisters>& iret = kernel_.pending_state();
  if (!iret) return std::nullopt;
  uint8_t bytes[2];
  if (!kernel_code_.read(iret->rip, std::as_writable_bytes(std::span(bytes))) ||
      bytes[0] != 0x48 || bytes[1] != 0xCF)  // REX.W IRET
    return std::nullopt;
  uint64_t frame[4];  // RIP, CS, RFLAGS, RSP (then SS)
  if (!kernel_code_.read(iret->rsp, std::as_writable_bytes(std::span(frame))) || (frame[1] & 3) != 3)
    return std::nullopt;
  GuestRegisters resumed = *iret;
  resumed.rip = frame[0], resumed.rflags = frame[2], resumed.rsp = frame[3];
  resumed.fs_base = after.fs_base, resumed.gs_base = after.gs_base, resumed.cr3 = after.cr3;
  return resumed;
}

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
    if (!in_user_) {
      if (std::optional<GuestRegisters> resumed = iret_return_state(after)) {
        if (auto late = user_.retired_before_interrupt(*resumed)) {
          ++late_interrupts_;
          out.push_back(*late);
        }
      }
    }
    on_user_step(after, out);
    return out;
  }
  ++kernel_steps_;
  if (in_user_) {
    // Left user mode with a step report. Hosts that deliver SYSCALL's single-step trap at the
    // entry point report it here; otherwise it is counted at the re-entry (enter_user).
    if (after.rip == syscall_entry_)
      if (auto syscall = user_.syscall_entered()) out.push_back(*syscall);
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
  if (auto late = user_.retired_before_interrupt(*resumed)) {
    ++late_interrupts_;
    out.push_back(*late);
  }
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
  if (auto r = user_.retired_before_interrupt(after)) {
    ++unannounced_returns_;
    out.push_back(*r);
  }
  if (auto syscall = user_.enter_user(after)) out.push_back(*syscall);  // pending dropped or a SYSCALL
  in_user_ = true;
  return out;
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
