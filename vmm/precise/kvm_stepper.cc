#include "vmm/precise/kvm_stepper.h"

namespace vmm {

KvmStepper::KvmStepper(GuestRam& ram, const pmu::cache::Geometry& cache, uint64_t syscall_entry)
    : user_code_(ram),
      kernel_code_(ram, PagedGuestMemory::ReadAccess::kSupervisor),
      user_accountant_(cache),
      kernel_accountant_(cache),
      user_(user_accountant_, user_code_, 3),
      kernel_(kernel_accountant_, kernel_code_, 0),
      syscall_entry_(syscall_entry) {}

std::optional<pmu::RetiredInstruction> KvmStepper::on_step(const GuestRegisters& after,
                                                           uint8_t cpl, uint64_t cr3) {
  user_code_.set_cr3(cr3);
  kernel_code_.set_cr3(cr3);
  if (cpl == 3) {
    ++user_steps_;
    // The kernel's last instruction (IRETQ/SYSRET) retired into user mode, if its pre-state is
    // known (stepping may have started later).
    std::optional<pmu::RetiredInstruction> kernel = kernel_.step(after);
    kernel_.leave_user();
    // Back from the kernel: a pending SYSCALL retired if execution resumes right after it.
    std::optional<pmu::RetiredInstruction> user = in_user_ ? user_.step(after) : user_.enter_user(after);
    in_user_ = true;
    // At most one of the two: a CPL-3 step follows either a user step or a kernel one.
    return user ? user : kernel;
  }
  ++kernel_steps_;
  std::optional<pmu::RetiredInstruction> syscall;
  if (in_user_) {
    // Left user mode with a step report. Hosts that deliver SYSCALL's single-step trap at the
    // entry point report it here; otherwise it is counted at the re-entry (enter_user).
    if (after.rip == syscall_entry_) syscall = user_.syscall_entered();
    in_user_ = false;
    kernel_.leave_user();
  }
  std::optional<pmu::RetiredInstruction> kernel = kernel_.step(after);
  return syscall ? syscall : kernel;
}

void KvmStepper::on_other_exit(uint8_t cpl) {
  if (cpl != 3) in_user_ = false;
}

void KvmStepper::stop() {
  in_user_ = false;
  kernel_.leave_user();
}

}  // namespace vmm
