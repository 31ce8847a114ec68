// One KVM vCPU: its fd, the shared kvm_run page, and typed wrappers of the ioctls pmuvm uses.
// Used only from the vCPU's own thread, except request_exit() (any thread).
#pragma once

#include "vmm/kvm/kvm_abi.h"
#include "vmm/kvm/kvm_state.h"

#include <cstdint>
#include <optional>
#include <vector>

#include "vmm/boot/long_mode.h"
#include "vmm/kvm/kvm_vm.h"

namespace vmm {

class KvmVcpu {
 public:
  KvmVcpu(KvmVm& vm, uint32_t index);
  ~KvmVcpu();
  KvmVcpu(const KvmVcpu&) = delete;
  KvmVcpu& operator=(const KvmVcpu&) = delete;

  uint32_t index() const { return index_; }
  kvm_run* run_state() { return run_; }

  void set_cpuid(const std::vector<kvm_cpuid_entry2>& entries);
  // 64-bit entry: segments/CRs from `state`, RIP/RSP/RDI/RSI as given, RFLAGS = 0x2.
  void enter_long_mode(const LongModeState& state, uint64_t rip, uint64_t rdi, uint64_t rsi);
  void make_runnable();  // secondary vCPUs start UNINITIALIZED (DESIGN §3)
  void set_msr(uint32_t index, uint64_t value);
  // The same for a value the guest chose: false where KVM refuses it (its #GP), not an error.
  bool try_set_msr(uint32_t index, uint64_t value);
  uint64_t msr(uint32_t index);  // KVM_GET_MSRS of one MSR (e.g. IA32_LSTAR)
  static constexpr uint64_t kTrapFlag = 1u << 8;
  static constexpr uint64_t kResumeFlag = 1u << 16;
  // KVM_SET_GUEST_DEBUG as given (the step controller computes it: vmm/precise/debug_slots.h).
  void set_guest_debug(const kvm_guest_debug& debug);
  // The guest's own DR0-3, DR6, DR7 (KVM keeps them apart from the ones a VMM debugs with).
  kvm_debugregs debug_registers() const;
  // Delivers #DB to the guest at the next entry, its DR6 set to `dr6` first (what the hardware
  // would have left there). False (nothing done) when an exception is already pending.
  bool inject_debug_exception(uint64_t dr6);
  // Sets RFLAGS.RF: the instruction at RIP runs without its execution breakpoint firing.
  void set_resume_flag() { set_rflags_bits(kResumeFlag); }
  // Sets RFLAGS.TF (the guest's own, after KVM's single-step cleared it).
  void set_trap_flag() { set_rflags_bits(kTrapFlag); }
  // Sets `bits` in RFLAGS (nothing when they are set already). With KVM_CAP_SYNC_REGS in the
  // kvm_run page's copy, marked dirty: KVM loads it at the next KVM_RUN, so the stepper's RF costs
  // no KVM_GET_REGS / KVM_SET_REGS pair per step; otherwise through those ioctls.
  void set_rflags_bits(uint64_t bits);

  // KVM_RUN. Returns 0, or -errno for EINTR/EAGAIN (the caller loops); throws on other errors.
  int run();

  // The registers now (the kvm_run page's copy when set_rflags_bits() changed it).
  kvm_regs regs() const;
  void set_regs(const kvm_regs& regs);
  kvm_sregs sregs() const;
  // The registers as they were at the last exit, without an ioctl: KVM copies them into the
  // kvm_run page on every exit (KVM_CAP_SYNC_REGS), which saves a KVM_GET_(S)REGS round trip per
  // trapped MSR or stepped instruction. Falls back to the ioctls where the capability is missing.
  // Valid only between an exit and the next set_regs()/enter_long_mode() or KVM_RUN.
  kvm_regs exit_regs() const { return synced_ ? run_->s.regs.regs : regs(); }
  kvm_sregs exit_sregs() const { return synced_ ? run_->s.regs.sregs : sregs(); }
  void nmi();
  // CR2, with a KVM_GET_SREGS / KVM_SET_SREGS round trip (everything else written back as read).
  void set_cr2(uint64_t value);
  // Injects #PF (vector 14) with `error_code` and CR2 = `linear`, delivered when the vCPU next
  // runs, before it executes another instruction: the boundary the vCPU stopped at. Returns false
  // (and injects nothing) when an exception is already pending or being injected.
  bool inject_page_fault(uint64_t linear, uint32_t error_code);
  // One 32-bit register of the in-kernel local APIC (offset as in the xAPIC page, e.g. 0x340 =
  // LVT performance counter), read with KVM_GET_LAPIC. There is deliberately no single-register
  // write: KVM_SET_LAPIC rewrites the whole state (timer re-armed, IRR overwritten).
  uint32_t lapic_register(uint32_t offset) const;
  // Whether an interrupt waits for the guest: a vector requested in the in-kernel local APIC
  // (IRR) or an NMI pending (KVM_GET_LAPIC, KVM_GET_VCPU_EVENTS). An expired LAPIC timer shows
  // after the KVM_RUN following its expiry (KVM moves it to the IRR on entry).
  bool interrupt_pending() const;
  // Whether KVM holds an event it will deliver at the next entry (an exception pending or being
  // injected, an interrupt or NMI being injected: one whose delivery an exit interrupted) or
  // the vCPU is in an interrupt shadow (STI, MOV SS): the next instruction is not simply the
  // one at RIP (KVM_GET_VCPU_EVENTS).
  bool event_in_flight() const;
  // The FPU/SSE/AVX state in the XSAVE layout (KVM_GET/SET_XSAVE): what the user code emulator
  // reads and writes the XMM registers through.
  void get_xsave(kvm_xsave& out) const;
  void set_xsave(const kvm_xsave& state);

  // Snapshot / migration (kvm_state.h, kvm_vcpu_state.cc). Only while the vCPU is parked: after
  // its last exit it went through one more KVM_RUN with immediate_exit set, so an I/O or MSR
  // access it exited for is complete (KVM's API: the state is consistent only then).
  // `msr_indices`: KvmSystem::msrs_to_save().
  VcpuArchState save_state(const std::vector<uint32_t>& msr_indices) const;
  // Sets only the saved MSRs that are in `msr_indices` (KvmSystem::msrs_to_save()) and not
  // paravirtual (restorable_msrs.h); the others are named in a warning.
  void restore_state(const VcpuArchState& state, const std::vector<uint32_t>& msr_indices);
  // Makes exit_regs()/exit_sregs() show the vCPU's current state before its first KVM_RUN (a
  // restored vCPU has had no exit yet that would have filled them).
  void load_exit_state();

 private:
  // KVM_SET_SREGS of `s`, TR's cached type as the guest loaded it (kvm_vcpu.cc says why).
  void write_sregs(kvm_sregs s, const char* what);
  KvmVm& vm_;
  uint32_t index_;
  int fd_ = -1;
  kvm_run* run_ = nullptr;
  size_t run_size_ = 0;
  bool synced_ = false;  // KVM_SYNC_X86_REGS | KVM_SYNC_X86_SREGS are on
  // The kvm_run page's register copy is the vCPU's current state (after a KVM_RUN, KVM stores it
  // there whatever the return; set_regs() and load_exit_state() keep it so): set_rflags_bits()
  // may change it and mark it dirty.
  bool exit_regs_current_ = false;
  bool regs_dirty() const { return synced_ && (run_->kvm_dirty_regs & KVM_SYNC_X86_REGS) != 0; }
};

}  // namespace vmm
