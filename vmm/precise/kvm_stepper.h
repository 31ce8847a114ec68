// The KVM stepper of the precise backend (DESIGN §4.7), VMM side. The run loop single-steps the
// vCPU with KVM_GUESTDBG_SINGLESTEP (on SVM and VMX hosts it stops at every CPL) and hands each
// step's state — the registers *after* the instruction, and the CPL — to on_step(). Like the
// guest-assisted stepper it feeds the shared step sequencer and accountant; unlike it, it needs
// nothing from the guest kernel, and it also sees CPL-0 instructions (NetBurst T0_OS).
// No KVM dependency: tested with register states over guest RAM and real page tables.
//
// How a step stream maps to retired instructions (single-step traps are taken after an
// instruction retires; interrupt and exception delivery clear TF, so handlers are not stepped):
//  * step at CPL 3 after a CPL-3 step: the instruction at the earlier RIP retired.
//  * user mode left without a step (exception, interrupt, SYSCALL — measured on the nested AMD
//    host: SYSCALL with TF set raises no trap, FMASK clears TF): the pending user instruction did
//    not retire, unless it is a SYSCALL and user mode is re-entered in the same address space at
//    its RIP + 2; it is counted then (StepSequencer::enter_user). An interrupt before a SYSCALL
//    re-enters at the SYSCALL itself and counts nothing. LLWPCB's #UD re-enters at RIP + 5.
//  * when only user code is stepped, the kernel is not: it announces each return into a profiled
//    task with its trap frame (PMUVM_MSR_USER_ENTRY), user mode counts as entered with that state
//    (the re-entry rules above apply to it), and the run loop lets the kernel run free to the
//    frame's RIP with an instruction breakpoint; single-stepping resumes there (on_user_entry).
//  * the run loop also puts an instruction breakpoint on the SYSCALL entry point (LSTAR) while it
//    steps user code, so SYSCALL is normally reported there, at CPL 0, as it retires: it is
//    counted at once (RIP and bytes checked), with the PMU state of that moment, and nothing is
//    left pending. The re-entry rule above is the fallback (e.g. a guest that changes LSTAR).
//  * CPL-0 steps are counted as CPL-0 instructions the same way, for the PMU models that count
//    them (LWP ignores them: only CPL-3 execution counts).
//  * a kernel path that returns to user mode unannounced (the bundled kernel's NMI handler, which
//    never switches tasks) restores the TF its frame was pushed with: one user instruction runs
//    and traps. The run loop keeps #DB intercepted while a profiled task is in the kernel, so the
//    trap reaches the VMM (not the guest) and the pending instruction counts, with the trap's
//    state as its post-state, if that state is where it leads (on_unannounced_return). (Measured
//    here: before this interception existed, the guest took that trap itself.) The PMU models
//    see the instruction after the kernel's handler, as if the interrupt had come before it: a
//    PMI handler's reload is not overtaken by it, so counts and PMIs stay exact.
//  * a kernel that announces nothing (Linux; set_unannounced_kernel): the SYSCALL entry point is
//    the guest's IA32_LSTAR, and a SYSCALL counted there makes its return point (RIP + 2, where
//    SYSRET resumes) the resume_rip() the run loop runs to by breakpoint, since nothing tells the
//    VMM the registers user mode resumes with. Interrupts and exceptions return through frames
//    with TF set (the unannounced return above). When the kernel starts something that counts
//    (an LWPCB loaded, a counter enabled) no frame on its way out has TF: the run loop steps the
//    kernel, interrupts held, until user mode is reached (Machine's "seeking").
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>

#include "pmu/cache/cache_model.h"
#include "pmu/retired_instruction.h"
#include "vmm/memory/page_walker.h"
#include "vmm/precise/step_accountant.h"
#include "vmm/precise/step_sequencer.h"
#include "vmm/precise/trap_frame.h"

namespace vmm {

// The instructions one report settles, in retirement order (at most two: the kernel's IRETQ
// into user mode, then the user instruction before the report). Fixed storage: this is built at
// every step.
class Retirements {
 public:
  void push_back(const pmu::RetiredInstruction& r) {
    if (size_ == items_.size()) throw std::logic_error("KvmStepper: more than 2 retirements in a report");
    items_[size_++] = r;
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const pmu::RetiredInstruction& operator[](size_t i) const { return items_[i]; }
  const pmu::RetiredInstruction* begin() const { return items_.data(); }
  const pmu::RetiredInstruction* end() const { return items_.data() + size_; }

 private:
  std::array<pmu::RetiredInstruction, 2> items_{};
  size_t size_ = 0;
};

class KvmStepper {
 public:
  // `syscall_entry`: the guest's IA32_LSTAR (where SYSCALL's single-step trap is reported).
  KvmStepper(GuestRam& ram, const pmu::cache::Geometry& cache, uint64_t syscall_entry);

  // One single-step exit. Returns the instructions that retired and count, in retirement order:
  // none or one, or two when the kernel's IRETQ (stepped) and a user instruction both retire.
  Retirements on_step(const GuestRegisters& after, uint8_t cpl, uint64_t cr3);
  // A single-step trap at CPL 3 that the guest took without being stepped: a kernel path that
  // returned to user mode unannounced (an NMI handler's IRETQ) restored the TF its frame was
  // pushed with, so exactly one user instruction ran, the pending one if `after` is where it
  // leads. Returns it (then `after` is the next pre-state).
  Retirements on_unannounced_return(const GuestRegisters& after);
  // The same, when the one user instruction that ran was a SYSCALL: the run loop's breakpoint on
  // the SYSCALL entry point (kept while #DB is intercepted for an unannounced kernel) was reached
  // with `at_entry` (CPL 0; RCX = the SYSCALL's return address) in address space `cr3`. Empty
  // when it was not the pending instruction's SYSCALL (a Linux signal handler, which the kernel
  // enters with TF clear, runs unstepped): the run loop then drops that breakpoint until user
  // mode traps again, and the interrupted instruction counts when sigreturn returns to it.
  Retirements on_unannounced_syscall(const GuestRegisters& at_entry, uint64_t cr3);

  // PMUVM_MSR_USER_ENTRY while only user code is stepped: the kernel is about to return to user
  // mode with the trap frame at `frame_gpa`. The run loop lets the kernel run free to the frame's
  // RIP (resume_rip(): an instruction breakpoint) instead of stepping its return path; user mode
  // counts as entered with the frame's state, so the first step report there counts the
  // instruction at that RIP. Returns the SYSCALL this return settles, if any.
  Retirements on_user_entry(uint64_t frame_gpa, const StepContext& ctx);
  // Where the run loop should stop the free-running kernel (user mode resumes there), if set.
  const std::optional<uint64_t>& resume_rip() const { return resume_rip_; }
  // The breakpoint at resume_rip() was reached with the vCPU in state `at`: an exit, no
  // instruction retired. `at` becomes the first instruction's pre-state: the frame was read in
  // the kernel, where a guest that uses SWAPGS has its own GS base.
  void on_user_arrival(const GuestRegisters& at);

  // The vCPU exited at an instruction boundary for another reason (MSR, I/O, HLT): at CPL 0 user
  // mode was left (the pending instruction is settled when user mode is re-entered). A kernel
  // step stream goes on: the MSR or I/O instruction retires when the vCPU resumes.
  void on_other_exit(uint8_t cpl);
  // Stepping stops (until the next return to user mode, which re-enters through enter_user).
  void stop();

  uint64_t syscall_entry() const { return syscall_entry_; }
  // True when the kernel instruction at `at.rip` (address space `cr3`) is SYSRET. Its single-step
  // trap is not delivered (measured on the nested AMD host, like SYSCALL's), so a kernel stepped
  // on its way to user mode would run on unobserved: the run loop runs to RCX instead.
  bool at_sysret(const GuestRegisters& at, uint64_t cr3);
  // User mode is re-entered with state `user` (a SYSRET about to run: RIP = RCX, RFLAGS = R11);
  // the run loop makes its first instruction trap (on_unannounced_return). Returns the SYSCALL
  // this return settles, if any.
  Retirements expect_user_entry(const GuestRegisters& user);
  // The guest kernel announces no return to user mode (Linux): SYSCALL enters at `syscall_entry`
  // (its IA32_LSTAR), and a counted SYSCALL sets resume_rip() to its return point.
  void set_unannounced_kernel(uint64_t syscall_entry) {
    syscall_entry_ = syscall_entry;
    unannounced_kernel_ = true;
  }
  // After a CPL-3 step: true when the instruction that just retired may have cleared RFLAGS.TF
  // (POPF, IRET), or is unknown. Otherwise TF is still set and KVM keeps stepping without
  // KVM_SET_GUEST_DEBUG being issued again (one ioctl per step saved).
  bool user_tf_may_be_clear() const;
  uint64_t user_steps() const { return user_steps_; }
  uint64_t kernel_steps() const { return kernel_steps_; }
  uint64_t unannounced_returns() const { return unannounced_returns_; }
  uint64_t user_entries() const { return user_entries_; }  // breakpoint arrivals in user mode
  uint64_t bad_frames() const { return bad_frames_; }

  // Snapshot / migration: everything but the guest-memory views (rebuilt over the new RAM).
  template <class Archive>
  void archive(Archive& a) {
    a(user_accountant_, kernel_accountant_, user_, kernel_, syscall_entry_, unannounced_kernel_,
      in_user_, user_steps_, kernel_steps_, unannounced_returns_, user_entries_, bad_frames_,
      resume_rip_);
  }

 private:
  void on_user_step(const GuestRegisters& after, Retirements& out);

  GuestRam& ram_;                 // the kernel's trap frames (on_user_entry)
  PagedGuestMemory user_code_;    // user instructions: fetched as user mode sees them
  PagedGuestMemory kernel_code_;  // kernel instructions: supervisor pages too
  // Separate cache models and predictors per CPL: which kernel instructions get stepped depends
  // on wall time (timer ticks), and letting them touch the user model would make user records
  // (DCache misses, prediction bits) differ between two runs with the same --seed. The
  // guest-assisted stepper never sees kernel code, so this also keeps both steppers identical.
  StepAccountant user_accountant_;
  StepAccountant kernel_accountant_;
  StepSequencer user_;
  StepSequencer kernel_;
  uint64_t syscall_entry_;
  bool unannounced_kernel_ = false;
  bool in_user_ = false;  // the last report was a CPL-3 step
  uint64_t user_steps_ = 0, kernel_steps_ = 0, unannounced_returns_ = 0,
           user_entries_ = 0, bad_frames_ = 0;
  std::optional<uint64_t> resume_rip_;
};

}  // namespace vmm
