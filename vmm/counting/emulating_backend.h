// `--stepper emulate` (DESIGN §4.7, "Emulated counting"; issue 40): the KVM stepper
// (kvm_stepping_backend.h) with an emulator in front of it. Wherever the stepper stopped at a
// counted user instruction and the PMU models only count (their UnseenAllowance: instructions,
// branches and conditional branches, nothing shown before the batch's end), the user code from
// there runs in the embedded TCG (vmm/emulate/user_code_emulator.h) on the vCPU's registers and
// the guest's RAM, up to the models' next boundary, an instruction KVM must execute, a data
// access the guest's tables refuse, or the time slice. The models take what retired as one batch
// (as with the host backend), the registers go back to KVM, and the stepper plans the
// instruction there: KVM steps it (the boundary's own instruction, the kernel entry, the fault)
// and the emulator takes over at the next stop. Where an enabled event needs each instruction's
// details (cache misses, prediction bits, LBR, PEBS, kernel instructions' cycles), or the guest
// debugs itself (TF, DR7), the stepper steps as `kvm` does. Nothing of the emulator is ever
// saved: a pause, snapshot or migration finds the vCPU's state in KVM.
#pragma once

#include <array>
#include <cstdint>

#include "vmm/counting/kvm_stepping_backend.h"
#include "vmm/emulate/user_code_emulator.h"

namespace vmm {

class EmulatingBackend : public OverKvmStepping {
 public:
  // Throws VmmError when Unicorn cannot be loaded (vmm/emulate/unicorn_library.h).
  EmulatingBackend(CountedVcpu& vcpu, GuestRam& ram, const pmu::cache::Geometry& cache,
                   bool multiple_vcpus);

  void before_run() override;
  // An emulated slice held interrupts without an exit: the stepper looks at its window at once.
  void after_exit(bool raised, bool kicked) override;
  void log_closing_lines() const override;
  void print_stats(std::FILE* out, const ExitTally& exits) const override;

  // Why an emulated slice ended, or why none started where the stepper stopped in user code.
  enum Reason : uint8_t {
    kBoundary,        // the models' next event (or a pause point) is the next instruction's
    kKernelEntry,     // SYSCALL, INT n, a far transfer: the kernel runs next
    kNotComputing,    // CPUID, RDTSC, x87/SSE/AVX, segment loads, ... (emulation_policy.h)
    kLocked,          // LOCK / XCHG with memory while other vCPUs run
    kRefusedAccess,   // a fetch or data access the guest's tables refuse: KVM raises the #PF
    kTimeSlice,       // interrupts must not wait longer
    kDetailNeeded,    // an enabled event needs each instruction's details: stepped
    kGuestDebugging,  // the guest's TF or DR7 breakpoints: stepped
    kMachineState,    // alignment checks, protection keys, not 64-bit code, an event or an
                      // interrupt shadow in KVM: stepped
    kReasonCount,
  };

 private:
  // Before a KVM_RUN: runs the user code at the pending instruction in the emulator, when it
  // may (see the header comment).
  void emulate();
  // Why the emulator may not start here (kReasonCount: it may).
  Reason refused_start(const kvm_regs& r, const kvm_sregs& s) const;

  struct KvmXmm : XmmRegisters {
    explicit KvmXmm(KvmVcpu& v) : vcpu(v) {}
    File read() override;
    void write(const File& xmm) override;
    static constexpr size_t kXmm0 = 160, kXstateBv = 512;
    static constexpr uint64_t kXstateSse = 1u << 1;
    KvmVcpu& vcpu;
    kvm_xsave state{};  // as read last (written back with the new XMM registers)
  };

  CountedVcpu& vcpu_;
  UserCodeEmulator emulator_;
  KvmXmm xmm_;
  bool emulated_ = false;  // since the last exit was handled
  struct Stats {
    uint64_t slices = 0;                        // emulator runs that retired something
    uint64_t instructions = 0;                  // CPL-3 instructions they retired
    std::array<uint64_t, kReasonCount> ends{};  // by reason
  } stats_;
};

}  // namespace vmm
