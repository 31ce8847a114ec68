#include "vmm/counting/emulating_backend.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "vmm/vmm_error.h"

namespace vmm {
namespace {

constexpr uint64_t kAlignmentCheck = 1u << 18;  // RFLAGS.AC, and CR0.AM at the same bit
constexpr uint64_t kCr4ProtectionKeys = 1u << 22;
constexpr uint64_t kEferNoExecute = 1u << 11;
constexpr uint64_t kDr7Enables = 0xFF;  // L0-3, G0-3

constexpr uint64_t kCr0Emulation = 1u << 2, kCr0TaskSwitched = 1u << 3;
constexpr uint64_t kCr4FxsrEnabled = 1u << 9;

// Where the guest can run SSE now: CR4.OSFXSR set, CR0.EM and TS clear (else #UD or #NM).
bool sse_usable(const kvm_sregs& s) {
  return (s.cr4 & kCr4FxsrEnabled) && !(s.cr0 & (kCr0Emulation | kCr0TaskSwitched));
}

// An emulated slice is at most this long: held interrupts wait no longer than the stepper's
// window allows (kInterruptWindowNs; the window is looked at after each slice).
constexpr uint64_t kSliceUs = kInterruptWindowNs / 4000;

// The most a batch may hold of what `allowance` limits (a batch holds fewer than each limit).
uint64_t most(uint64_t limit) { return limit == UINT64_MAX ? limit : limit - 1; }

constexpr std::array<const char*, EmulatingBackend::kReasonCount> kReasonNames = {
    "boundary",   "kernel entry",   "not computing",   "locked",        "refused access",
    "time slice", "details needed", "guest debugging", "machine state",
};

}  // namespace

// The vCPU's XMM registers in KVM's XSAVE area (the legacy region's XMM0-15 at byte 160). Read
// only when emulated code uses them; written back only when it changed them.
XmmRegisters::File EmulatingBackend::KvmXmm::read() {
  vcpu.get_xsave(state);
  XmmRegisters::File xmm{};
  const auto* bytes = reinterpret_cast<const uint8_t*>(state.region);
  // XSTATE_BV's SSE bit clear: the registers are in their initial state, zero.
  if (*reinterpret_cast<const uint64_t*>(bytes + kXstateBv) & kXstateSse)
    std::memcpy(xmm.data(), bytes + kXmm0, sizeof(xmm));
  return xmm;
}

void EmulatingBackend::KvmXmm::write(const XmmRegisters::File& xmm) {
  auto* bytes = reinterpret_cast<uint8_t*>(state.region);
  std::memcpy(bytes + kXmm0, xmm.data(), sizeof(xmm));
  *reinterpret_cast<uint64_t*>(bytes + kXstateBv) |= kXstateSse;
  vcpu.set_xsave(state);
}

EmulatingBackend::EmulatingBackend(CountedVcpu& vcpu, GuestRam& ram,
                                   const pmu::cache::Geometry& cache, bool multiple_vcpus)
    : OverKvmStepping(vcpu, ram, cache, /*block_steps=*/true, /*trap_flag_steps=*/!multiple_vcpus),
      vcpu_(vcpu),
      emulator_(ram, multiple_vcpus),
      xmm_{vcpu.kvm()} {}

void EmulatingBackend::before_run() {
  emulate();
  stepping_.before_run();
}

void EmulatingBackend::after_exit(bool raised, bool kicked) {
  stepping_.after_exit(raised, kicked || std::exchange(emulated_, false));
}

EmulatingBackend::Reason EmulatingBackend::refused_start(const kvm_regs& r,
                                                         const kvm_sregs& s) const {
  if ((r.rflags & KvmVcpu::kTrapFlag) || (stepping_.guest_debug().dr7 & kDr7Enables))
    return kGuestDebugging;
  // What the emulator does not model: #AC, protection keys, compatibility mode.
  if (((s.cr0 & kAlignmentCheck) && (r.rflags & kAlignmentCheck)) || (s.cr4 & kCr4ProtectionKeys) ||
      !s.cs.l || s.cs.dpl != 3)
    return kMachineState;
  return kReasonCount;
}

void EmulatingBackend::emulate() {
  StepController& controller = stepping_.controller();
  const GuestRegisters* pre = controller.emulation_start();
  if (pre == nullptr || step_scope(vcpu_.pmu()) == StepScope::kNothing) return;
  pmu::UnseenAllowance allowance = vcpu_.pmu().unseen_allowance();
  if (const std::optional<uint64_t> to_pause = vcpu_.instructions_to_pause())
    allowance.instructions = std::min(allowance.instructions, *to_pause);
  if (!allowance.possible) {
    ++stats_.ends[kDetailNeeded];
    return;
  }
  if (allowance.instructions <= 1) {
    ++stats_.ends[kBoundary];
    return;
  }
  KvmVcpu& kvm = vcpu_.kvm();
  kvm_regs r = kvm.exit_regs();
  const kvm_sregs s = kvm.exit_sregs();
  if (r.rip != pre->rip) return;  // not at the pending instruction (still at a return site)
  if (const Reason why = refused_start(r, s); why != kReasonCount) {
    ++stats_.ends[why];
    return;
  }
  // An event KVM delivers at the next entry belongs before the instruction at RIP, and an
  // interrupt shadow after it: KVM steps that one.
  if (kvm.event_in_flight()) {
    ++stats_.ends[kMachineState];
    return;
  }
  GuestRegisters g = general_registers(r);
  g.fs_base = s.fs.base, g.gs_base = s.gs.base;
  g.cr3 = s.cr3;
  const UserCodeEmulator::Limit limit{.instructions = most(allowance.instructions),
                                      .branches = most(allowance.branches),
                                      .conditional_branches = most(allowance.conditional_branches)};
  const EmulationRun run = emulator_.run(g, s.cr3, (s.efer & kEferNoExecute) != 0, limit, kSliceUs,
                                         sse_usable(s) ? &xmm_ : nullptr);
  if (!run.position_known)
    // The emulator could not name where it stopped (Unicorn failed otherwise than by a guest
    // fault: the host refused it memory for a window). Never seen; the run cannot go on
    // exactly.
    throw VmmError("vCPU " + std::to_string(vcpu_.index()) +
                   ": --stepper emulate: the emulator stopped where it cannot tell (block at rip " +
                   std::to_string(g.rip) + "); use --stepper kvm");
  switch (run.end) {
    case EmulationRun::End::kLimit: ++stats_.ends[kBoundary]; break;
    case EmulationRun::End::kFault: ++stats_.ends[kRefusedAccess]; break;
    case EmulationRun::End::kTimeout: ++stats_.ends[kTimeSlice]; break;
    case EmulationRun::End::kKvmOnly:
      ++stats_.ends[run.kvm_only == KvmOnly::kKernelEntry ? kKernelEntry
                    : run.kvm_only == KvmOnly::kLocked    ? kLocked
                                                          : kNotComputing];
      break;
  }
  emulated_ = true;
  if (run.retired == 0) return;
  vcpu_.pmu().retire_unseen({.instructions = run.retired,
                             .branches = run.branches,
                             .conditional_branches = run.conditional_branches});
  vcpu_.add_counted(run.retired);
  ++stats_.slices;
  stats_.instructions += run.retired;
  // The registers go back to KVM (RF cleared: an instruction completed since it was set).
  set_general_registers(r, g);
  r.rflags &= ~KvmVcpu::kResumeFlag;
  kvm.set_regs(r);
  g.cr3 = s.cr3;
  controller.ran_unseen(g);
}

void EmulatingBackend::log_closing_lines() const {
  stepping_.log_closing_lines();
  spdlog::info(
      "vCPU {}: emulator: {} of {} counted instructions emulated in {} slices; returns to KVM: "
      "{} at a boundary, {} kernel entries, {} not computing, {} locked, {} refused accesses, "
      "{} time slices; stepped instead: {} (details needed), {} (guest debugging), {} (machine "
      "state)",
      vcpu_.index(), stats_.instructions, vcpu_.counted(), stats_.slices, stats_.ends[kBoundary],
      stats_.ends[kKernelEntry], stats_.ends[kNotComputing], stats_.ends[kLocked],
      stats_.ends[kRefusedAccess], stats_.ends[kTimeSlice], stats_.ends[kDetailNeeded],
      stats_.ends[kGuestDebugging], stats_.ends[kMachineState]);
}

void EmulatingBackend::print_stats(std::FILE* out, const ExitTally& exits) const {
  stepping_.print_stats(out, exits);
  auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  std::fprintf(out, "pmuvm: vcpu%u: emulator: emulated instructions %llu, slices %llu",
               vcpu_.index(), u(stats_.instructions), u(stats_.slices));
  for (size_t i = 0; i < kReasonCount; ++i)
    std::fprintf(out, ", %s %llu", kReasonNames[i], u(stats_.ends[i]));
  std::fprintf(out, "\n");
  const UserCodeEmulator::Work& w = emulator_.work();
  std::fprintf(out,
               "pmuvm: vcpu%u: emulator work: runs %llu (and %llu known stops), pages checked "
               "%llu, dropped %llu, "
               "mapped %llu, blocks decoded %llu, checking %.3f s, running %.3f s\n",
               vcpu_.index(), u(w.runs), u(w.known_stops), u(w.pages_checked), u(w.pages_dropped),
               u(w.pages_mapped), u(w.blocks_decoded), w.checking_ns / 1e9, w.running_ns / 1e9);
  // What sent the runs back most often (where the emulator could run more).
  std::vector<std::pair<uint64_t, ZydisMnemonic>> by;
  for (const auto& [mnemonic, count] : w.kvm_only_by_mnemonic) by.emplace_back(count, mnemonic);
  std::sort(by.rbegin(), by.rend());
  std::fprintf(out, "pmuvm: vcpu%u: emulator stops: SIMD unusable %llu, SIMD accesses %llu",
               vcpu_.index(), u(w.simd_unusable), u(w.simd_accesses_unfit));
  for (size_t i = 0; i < by.size() && i < 12; ++i)
    std::fprintf(out, ", %s %llu", InstructionDecoder::mnemonic_name(by[i].second).c_str(),
                 u(by[i].first));
  std::fprintf(out, "\n");
}

}  // namespace vmm
