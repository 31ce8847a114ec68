#include "vmm/emulate/emulation_policy.h"

namespace vmm {

KvmOnly kvm_only(const DecodedInstruction& insn, bool multiple_vcpus) {
  if (insn.syscall || insn.iret || insn.sysret || insn.flow.kind == ControlFlow::Kind::kSyscall ||
      insn.flow.kind == ControlFlow::Kind::kInterrupt ||
      insn.flow.kind == ControlFlow::Kind::kUnknown)
    return KvmOnly::kKernelEntry;
  if (insn.lwp_instruction || insn.completed_by_kvm || insn.segment_written)
    return KvmOnly::kNotComputing;
  // The decoder's classes of instructions that compute in general registers and memory only
  // (trap_flag_safe, memory_computation exclude LOCK), the stack's PUSH/POP, near branches.
  const bool computes = insn.trap_flag_safe || insn.memory_computation || insn.stack_push_pop ||
                        insn.branch != pmu::BranchKind::kNone;
  if (!computes) return KvmOnly::kNotComputing;
  // XCHG with a memory operand is locked without the prefix; trap_flag_safe and
  // memory_computation refused LOCK already.
  if (multiple_vcpus && insn.mnemonic == ZYDIS_MNEMONIC_XCHG && insn.reads_memory)
    return KvmOnly::kLocked;
  return KvmOnly::kNo;
}

}  // namespace vmm
