#include "vmm/emulate/emulation_policy.h"

#include <cpuid.h>

namespace vmm {

SimdSupport SimdSupport::of_this_cpu() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return SimdSupport();
  auto bit = [](SimdIsa isa, bool present) {
    return static_cast<uint8_t>(present ? 1u << static_cast<unsigned>(isa) : 0);
  };
  return SimdSupport(bit(SimdIsa::kSse, edx & (1u << 25)) | bit(SimdIsa::kSse2, edx & (1u << 26)) |
                     bit(SimdIsa::kSse3, ecx & (1u << 0)) | bit(SimdIsa::kSsse3, ecx & (1u << 9)) |
                     bit(SimdIsa::kSse41, ecx & (1u << 19)) |
                     bit(SimdIsa::kSse42, ecx & (1u << 20)));
}

KvmOnly kvm_only(const DecodedInstruction& insn, bool multiple_vcpus, SimdSupport simd) {
  if (insn.syscall || insn.iret || insn.sysret || insn.flow.kind == ControlFlow::Kind::kSyscall ||
      insn.flow.kind == ControlFlow::Kind::kInterrupt ||
      insn.flow.kind == ControlFlow::Kind::kUnknown)
    return KvmOnly::kKernelEntry;
  if (insn.lwp_instruction || insn.completed_by_kvm || insn.segment_written)
    return KvmOnly::kNotComputing;
  // The decoder's classes of instructions that compute in general registers and memory only
  // (emulator_computation: DIV/IDIV, XADD, CMPXCHG, LOCK too), the stack's PUSH/POP, near
  // branches, and SSE's that compute without floating-point exceptions (no MXCSR flag to carry)
  // where the CPU has them.
  const bool computes = insn.trap_flag_safe || insn.memory_computation ||
                        insn.emulator_computation || insn.stack_push_pop ||
                        insn.branch != pmu::BranchKind::kNone ||
                        (insn.simd_computation && simd.has(insn.simd_isa));
  if (!computes) return KvmOnly::kNotComputing;
  // Unicorn's atomics are atomic within its own thread only: with other vCPUs running, a
  // locked instruction is KVM's. (With one vCPU, pmuvm's devices write guest RAM on its exits,
  // never while it runs in either.)
  if (multiple_vcpus && insn.locked) return KvmOnly::kLocked;
  return KvmOnly::kNo;
}

}  // namespace vmm
