#include "vmm/precise/instruction_decoder.h"

#include <array>

#include <cstring>
#include <stdexcept>
#include <string>

namespace vmm {
namespace {

void fill_context(const GuestRegisters& r, ZydisRegisterContext& ctx) {
  const std::pair<ZydisRegister, uint64_t> regs[] = {
      {ZYDIS_REGISTER_RAX, r.rax}, {ZYDIS_REGISTER_RBX, r.rbx}, {ZYDIS_REGISTER_RCX, r.rcx},
      {ZYDIS_REGISTER_RDX, r.rdx}, {ZYDIS_REGISTER_RSI, r.rsi}, {ZYDIS_REGISTER_RDI, r.rdi},
      {ZYDIS_REGISTER_RSP, r.rsp}, {ZYDIS_REGISTER_RBP, r.rbp}, {ZYDIS_REGISTER_R8, r.r8},
      {ZYDIS_REGISTER_R9, r.r9},   {ZYDIS_REGISTER_R10, r.r10}, {ZYDIS_REGISTER_R11, r.r11},
      {ZYDIS_REGISTER_R12, r.r12}, {ZYDIS_REGISTER_R13, r.r13}, {ZYDIS_REGISTER_R14, r.r14},
      {ZYDIS_REGISTER_R15, r.r15}, {ZYDIS_REGISTER_RIP, r.rip}};
  // Zydis resolves sub-registers (eax, r8d, ...) through their 64-bit enclosing register only
  // when asked for that exact enum, so the narrower views are filled too; which enum each one is
  // is looked up once (this runs for every memory operand of every stepped instruction).
  static const auto narrow = [&regs] {
    std::array<ZydisRegister, std::size(regs)> out{};
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = ZydisRegisterEncode(ZYDIS_REGCLASS_GPR32, ZydisRegisterGetId(regs[i].first));
    return out;
  }();
  for (size_t i = 0; i < std::size(regs); ++i) {
    ctx.values[regs[i].first] = regs[i].second;
    if (narrow[i] != ZYDIS_REGISTER_NONE) ctx.values[narrow[i]] = regs[i].second & 0xFFFFFFFFu;
  }
  ctx.values[ZYDIS_REGISTER_EIP] = r.rip & 0xFFFFFFFFu;
}

pmu::BranchKind classify(const ZydisDecodedInstruction& insn) {
  switch (insn.meta.category) {
    case ZYDIS_CATEGORY_COND_BR:
      return pmu::BranchKind::kConditional;  // Jcc, JrCXZ, LOOP/LOOPE/LOOPNE
    case ZYDIS_CATEGORY_UNCOND_BR:
      return (insn.attributes & ZYDIS_ATTRIB_IS_RELATIVE) ? pmu::BranchKind::kDirectJump
                                                          : pmu::BranchKind::kIndirectJump;
    case ZYDIS_CATEGORY_CALL: return pmu::BranchKind::kCall;
    case ZYDIS_CATEGORY_RET:
      // Zydis files IRET under RET; an interrupt return is not a branch for LWP (§4.2).
      if (insn.mnemonic == ZYDIS_MNEMONIC_IRET || insn.mnemonic == ZYDIS_MNEMONIC_IRETD ||
          insn.mnemonic == ZYDIS_MNEMONIC_IRETQ)
        return pmu::BranchKind::kNone;
      return pmu::BranchKind::kReturn;
    default:
      // SYSCALL/SYSENTER/INT n/INT3/IRET/SYSRET and anything else that changes rings is not a
      // branch for LWP (§4.2).
      return pmu::BranchKind::kNone;
  }
}

constexpr uint64_t kCF = 1u << 0, kPF = 1u << 2, kZF = 1u << 6, kSF = 1u << 7, kOF = 1u << 11;

// A near branch (JMP, Jcc, LOOP, JrCXZ, CALL, RET) with an operand-size prefix: in 64-bit mode
// Intel CPUs ignore the prefix and AMD CPUs honour it (a 16-bit operand: rel16 instead of rel32,
// the new RIP truncated to 16 bits, a 16-bit return address), so its length and its target
// depend on the CPU that runs the guest. Zydis decodes Intel's behaviour.
// Such a branch gets no computed successor: the stepper single-steps it and reads where it went.
bool vendor_dependent_branch(const ZydisDecodedInstruction& insn) {
  switch (insn.meta.category) {
    case ZYDIS_CATEGORY_COND_BR:
    case ZYDIS_CATEGORY_UNCOND_BR:
    case ZYDIS_CATEGORY_CALL:
    case ZYDIS_CATEGORY_RET:
      return insn.meta.branch_type != ZYDIS_BRANCH_TYPE_FAR &&
             (insn.attributes & ZYDIS_ATTRIB_HAS_OPERANDSIZE) != 0;
    default: return false;
  }
}

// It loads a segment register (MOV, POP, LFS/LGS/LSS) or an FS/GS base (WRFSBASE/WRGSBASE).
bool writes_segment(const ZydisDecodedInstruction& insn, const ZydisDecodedOperand* ops) {
  if (insn.mnemonic == ZYDIS_MNEMONIC_WRFSBASE || insn.mnemonic == ZYDIS_MNEMONIC_WRGSBASE)
    return true;
  for (uint8_t i = 0; i < insn.operand_count; ++i)
    if (ops[i].type == ZYDIS_OPERAND_TYPE_REGISTER &&
        (ops[i].actions & ZYDIS_OPERAND_ACTION_MASK_WRITE) &&
        ZydisRegisterGetClass(ops[i].reg.value) == ZYDIS_REGCLASS_SEGMENT)
      return true;
  return false;
}

// Whether a conditional branch is taken, from RFLAGS and RCX before it.
bool taken(const ZydisDecodedInstruction& insn, const GuestRegisters& r) {
  const uint64_t f = r.rflags;
  const bool cf = f & kCF, pf = f & kPF, zf = f & kZF, sf = f & kSF, of = f & kOF;
  // JrCXZ and LOOP use RCX, or ECX/CX with an address-size prefix.
  const uint64_t count_mask = insn.address_width == 64   ? ~0ull
                              : insn.address_width == 32 ? 0xFFFFFFFFull
                                                         : 0xFFFFull;
  const uint64_t count = r.rcx & count_mask;
  const bool count_left = ((count - 1) & count_mask) != 0;  // LOOP decrements first
  switch (insn.mnemonic) {
    case ZYDIS_MNEMONIC_JO: return of;
    case ZYDIS_MNEMONIC_JNO: return !of;
    case ZYDIS_MNEMONIC_JB: return cf;
    case ZYDIS_MNEMONIC_JNB: return !cf;
    case ZYDIS_MNEMONIC_JZ: return zf;
    case ZYDIS_MNEMONIC_JNZ: return !zf;
    case ZYDIS_MNEMONIC_JBE: return cf || zf;
    case ZYDIS_MNEMONIC_JNBE: return !cf && !zf;
    case ZYDIS_MNEMONIC_JS: return sf;
    case ZYDIS_MNEMONIC_JNS: return !sf;
    case ZYDIS_MNEMONIC_JP: return pf;
    case ZYDIS_MNEMONIC_JNP: return !pf;
    case ZYDIS_MNEMONIC_JL: return sf != of;
    case ZYDIS_MNEMONIC_JNL: return sf == of;
    case ZYDIS_MNEMONIC_JLE: return zf || sf != of;
    case ZYDIS_MNEMONIC_JNLE: return !zf && sf == of;
    case ZYDIS_MNEMONIC_JCXZ:
    case ZYDIS_MNEMONIC_JECXZ:
    case ZYDIS_MNEMONIC_JRCXZ: return count == 0;
    case ZYDIS_MNEMONIC_LOOP: return count_left;
    case ZYDIS_MNEMONIC_LOOPE: return count_left && zf;
    case ZYDIS_MNEMONIC_LOOPNE: return count_left && !zf;
    default: return false;
  }
}

uint64_t register_value(ZydisRegister reg, const GuestRegisters& r) {
  const uint64_t values[16] = {r.rax, r.rcx, r.rdx, r.rbx, r.rsp, r.rbp, r.rsi, r.rdi,
                               r.r8,  r.r9,  r.r10, r.r11, r.r12, r.r13, r.r14, r.r15};
  const ZyanI8 id = ZydisRegisterGetId(reg);
  if (id < 0 || id >= 16) return 0;
  const uint64_t v = values[id];
  switch (ZydisRegisterGetWidth(ZYDIS_MACHINE_MODE_LONG_64, reg)) {
    case 16: return v & 0xFFFF;
    case 32: return v & 0xFFFFFFFF;
    default: return v;
  }
}

bool completed_by_kvm(ZydisMnemonic m) {
  switch (m) {
    case ZYDIS_MNEMONIC_CPUID:
    case ZYDIS_MNEMONIC_IN:
    case ZYDIS_MNEMONIC_OUT:
    case ZYDIS_MNEMONIC_INSB:
    case ZYDIS_MNEMONIC_INSW:
    case ZYDIS_MNEMONIC_INSD:
    case ZYDIS_MNEMONIC_OUTSB:
    case ZYDIS_MNEMONIC_OUTSW:
    case ZYDIS_MNEMONIC_OUTSD:
    case ZYDIS_MNEMONIC_RDPMC:
    case ZYDIS_MNEMONIC_VMMCALL:
    case ZYDIS_MNEMONIC_VMCALL: return true;
    default: return false;
  }
}

// The string instructions (MOVS, STOS, LODS, SCAS, CMPS, INS, OUTS), which a REP prefix repeats.
bool is_string_instruction(ZydisMnemonic mnemonic) {
  switch (mnemonic) {
    // 26 labels, three to a line.
    // clang-format off
    case ZYDIS_MNEMONIC_MOVSB: case ZYDIS_MNEMONIC_MOVSW: case ZYDIS_MNEMONIC_MOVSD:
    case ZYDIS_MNEMONIC_MOVSQ: case ZYDIS_MNEMONIC_STOSB: case ZYDIS_MNEMONIC_STOSW:
    case ZYDIS_MNEMONIC_STOSD: case ZYDIS_MNEMONIC_STOSQ: case ZYDIS_MNEMONIC_LODSB:
    case ZYDIS_MNEMONIC_LODSW: case ZYDIS_MNEMONIC_LODSD: case ZYDIS_MNEMONIC_LODSQ:
    case ZYDIS_MNEMONIC_SCASB: case ZYDIS_MNEMONIC_SCASW: case ZYDIS_MNEMONIC_SCASD:
    case ZYDIS_MNEMONIC_SCASQ: case ZYDIS_MNEMONIC_CMPSB: case ZYDIS_MNEMONIC_CMPSW:
    case ZYDIS_MNEMONIC_CMPSD: case ZYDIS_MNEMONIC_CMPSQ: case ZYDIS_MNEMONIC_INSB:
    case ZYDIS_MNEMONIC_INSW: case ZYDIS_MNEMONIC_INSD: case ZYDIS_MNEMONIC_OUTSB:
    case ZYDIS_MNEMONIC_OUTSW: case ZYDIS_MNEMONIC_OUTSD:
      // clang-format on
      return true;
    default: return false;
  }
}

// Instructions that only compute in general registers and the arithmetic flags: none of them
// can fault on its own (no division, nothing privileged, nothing a CPU may lack beyond x86-64's
// baseline), reads RFLAGS.TF, or holds the single-step trap back.
bool register_computation(ZydisMnemonic m) {
  switch (m) {
    case ZYDIS_MNEMONIC_MOV:
    case ZYDIS_MNEMONIC_MOVZX:
    case ZYDIS_MNEMONIC_MOVSX:
    case ZYDIS_MNEMONIC_MOVSXD:
    case ZYDIS_MNEMONIC_LEA:
    case ZYDIS_MNEMONIC_XCHG:
    case ZYDIS_MNEMONIC_ADD:
    case ZYDIS_MNEMONIC_ADC:
    case ZYDIS_MNEMONIC_SUB:
    case ZYDIS_MNEMONIC_SBB:
    case ZYDIS_MNEMONIC_AND:
    case ZYDIS_MNEMONIC_OR:
    case ZYDIS_MNEMONIC_XOR:
    case ZYDIS_MNEMONIC_NOT:
    case ZYDIS_MNEMONIC_NEG:
    case ZYDIS_MNEMONIC_INC:
    case ZYDIS_MNEMONIC_DEC:
    case ZYDIS_MNEMONIC_CMP:
    case ZYDIS_MNEMONIC_TEST:
    case ZYDIS_MNEMONIC_IMUL:
    case ZYDIS_MNEMONIC_MUL:
    case ZYDIS_MNEMONIC_SHL:
    case ZYDIS_MNEMONIC_SHR:
    case ZYDIS_MNEMONIC_SAR:
    case ZYDIS_MNEMONIC_ROL:
    case ZYDIS_MNEMONIC_ROR:
    case ZYDIS_MNEMONIC_RCL:
    case ZYDIS_MNEMONIC_RCR:
    case ZYDIS_MNEMONIC_SHLD:
    case ZYDIS_MNEMONIC_SHRD:
    case ZYDIS_MNEMONIC_BT:
    case ZYDIS_MNEMONIC_BTS:
    case ZYDIS_MNEMONIC_BTR:
    case ZYDIS_MNEMONIC_BTC:
    case ZYDIS_MNEMONIC_BSF:
    case ZYDIS_MNEMONIC_BSR:
    case ZYDIS_MNEMONIC_BSWAP:
    case ZYDIS_MNEMONIC_CBW:
    case ZYDIS_MNEMONIC_CWDE:
    case ZYDIS_MNEMONIC_CDQE:
    case ZYDIS_MNEMONIC_CWD:
    case ZYDIS_MNEMONIC_CDQ:
    case ZYDIS_MNEMONIC_CQO:
    case ZYDIS_MNEMONIC_CLC:
    case ZYDIS_MNEMONIC_STC:
    case ZYDIS_MNEMONIC_CMC:
    case ZYDIS_MNEMONIC_CLD:
    case ZYDIS_MNEMONIC_STD:
    case ZYDIS_MNEMONIC_JMP:
    case ZYDIS_MNEMONIC_JB:
    case ZYDIS_MNEMONIC_JBE:
    case ZYDIS_MNEMONIC_JCXZ:
    case ZYDIS_MNEMONIC_JECXZ:
    case ZYDIS_MNEMONIC_JL:
    case ZYDIS_MNEMONIC_JLE:
    case ZYDIS_MNEMONIC_JNB:
    case ZYDIS_MNEMONIC_JNBE:
    case ZYDIS_MNEMONIC_JNL:
    case ZYDIS_MNEMONIC_JNLE:
    case ZYDIS_MNEMONIC_JNO:
    case ZYDIS_MNEMONIC_JNP:
    case ZYDIS_MNEMONIC_JNS:
    case ZYDIS_MNEMONIC_JNZ:
    case ZYDIS_MNEMONIC_JO:
    case ZYDIS_MNEMONIC_JP:
    case ZYDIS_MNEMONIC_JRCXZ:
    case ZYDIS_MNEMONIC_JS:
    case ZYDIS_MNEMONIC_JZ:
    case ZYDIS_MNEMONIC_LOOP:
    case ZYDIS_MNEMONIC_LOOPE:
    case ZYDIS_MNEMONIC_LOOPNE:
    case ZYDIS_MNEMONIC_CMOVB:
    case ZYDIS_MNEMONIC_CMOVBE:
    case ZYDIS_MNEMONIC_CMOVL:
    case ZYDIS_MNEMONIC_CMOVLE:
    case ZYDIS_MNEMONIC_CMOVNB:
    case ZYDIS_MNEMONIC_CMOVNBE:
    case ZYDIS_MNEMONIC_CMOVNL:
    case ZYDIS_MNEMONIC_CMOVNLE:
    case ZYDIS_MNEMONIC_CMOVNO:
    case ZYDIS_MNEMONIC_CMOVNP:
    case ZYDIS_MNEMONIC_CMOVNS:
    case ZYDIS_MNEMONIC_CMOVNZ:
    case ZYDIS_MNEMONIC_CMOVO:
    case ZYDIS_MNEMONIC_CMOVP:
    case ZYDIS_MNEMONIC_CMOVS:
    case ZYDIS_MNEMONIC_CMOVZ:
    case ZYDIS_MNEMONIC_SETB:
    case ZYDIS_MNEMONIC_SETBE:
    case ZYDIS_MNEMONIC_SETL:
    case ZYDIS_MNEMONIC_SETLE:
    case ZYDIS_MNEMONIC_SETNB:
    case ZYDIS_MNEMONIC_SETNBE:
    case ZYDIS_MNEMONIC_SETNL:
    case ZYDIS_MNEMONIC_SETNLE:
    case ZYDIS_MNEMONIC_SETNO:
    case ZYDIS_MNEMONIC_SETNP:
    case ZYDIS_MNEMONIC_SETNS:
    case ZYDIS_MNEMONIC_SETNZ:
    case ZYDIS_MNEMONIC_SETO:
    case ZYDIS_MNEMONIC_SETP:
    case ZYDIS_MNEMONIC_SETS:
    case ZYDIS_MNEMONIC_SETZ: return true;
    default: return false;
  }
}

bool canonical(uint64_t address) {
  const int64_t high = static_cast<int64_t>(address) >> 47;
  return high == 0 || high == -1;
}

// A general register (any width), RFLAGS or RIP: not a segment, control, debug, x87 or SIMD one.
bool general_or_flags(ZydisRegister reg) {
  switch (ZydisRegisterGetClass(reg)) {
    case ZYDIS_REGCLASS_GPR8:
    case ZYDIS_REGCLASS_GPR16:
    case ZYDIS_REGCLASS_GPR32:
    case ZYDIS_REGCLASS_GPR64:
    case ZYDIS_REGCLASS_FLAGS:
    case ZYDIS_REGCLASS_IP: return true;
    default: return false;
  }
}

// Whether every operand (hidden ones too) is an immediate, a general register or RFLAGS, a data
// memory operand (`memory` then set) or LEA's address.
bool general_operands(const ZydisDecodedInstruction& insn, const ZydisDecodedOperand* ops,
                      bool& memory) {
  for (uint8_t i = 0; i < insn.operand_count; ++i) {
    const ZydisDecodedOperand& op = ops[i];
    switch (op.type) {
      case ZYDIS_OPERAND_TYPE_IMMEDIATE: break;
      case ZYDIS_OPERAND_TYPE_REGISTER:
        if (!general_or_flags(op.reg.value)) return false;
        break;
      case ZYDIS_OPERAND_TYPE_MEMORY:
        if (op.mem.type == ZYDIS_MEMOP_TYPE_AGEN) break;  // LEA
        if (op.mem.type != ZYDIS_MEMOP_TYPE_MEM) return false;
        memory = true;
        break;
      default: return false;
    }
  }
  return true;
}

// May the KVM stepper single-step it with TF (DESIGN §4.7: the guest never sees a TF it did not
// set)? Only where nothing can show the TF while it runs: it computes in general registers only,
// so no exception frame (#PF, #AC, #GP, #DE, #UD) and no interrupt (they are held) can carry the
// TF, nothing reads it (PUSHF, SYSCALL's R11, INT n), and no MOV SS holds the trap back.
bool trap_flag_safe(const ZydisDecodedInstruction& insn, const ZydisDecodedOperand* ops,
                    const ControlFlow& flow) {
  if (insn.attributes & ZYDIS_ATTRIB_HAS_LOCK) return false;
  if (flow.kind == ControlFlow::Kind::kUnknown) return false;
  // Hints: the forms with a memory operand (0F 1F /0) do not access it.
  if (insn.mnemonic == ZYDIS_MNEMONIC_NOP || insn.mnemonic == ZYDIS_MNEMONIC_ENDBR64) return true;
  if (!register_computation(insn.mnemonic)) return false;
  // Jumps: relative ones only (a register target may be non-canonical: #GP), and not to a
  // non-canonical address.
  if (insn.meta.category == ZYDIS_CATEGORY_UNCOND_BR &&
      !(insn.attributes & ZYDIS_ATTRIB_IS_RELATIVE))
    return false;
  if (flow.kind == ControlFlow::Kind::kJump && !canonical(flow.target)) return false;
  bool memory = false;  // (only LEA's address: an address generation of the whitelist's)
  return general_operands(insn, ops, memory) && !memory;
}

// The same rules with data memory operands allowed (DecodedInstruction::memory_computation):
// such an instruction can fault only through its memory accesses. BT* with a memory operand is
// left out: its register bit offset reaches beyond the operand.
bool memory_computation(const ZydisDecodedInstruction& insn, const ZydisDecodedOperand* ops) {
  if (insn.attributes & ZYDIS_ATTRIB_HAS_LOCK) return false;
  if (!register_computation(insn.mnemonic)) return false;
  switch (insn.meta.category) {
    case ZYDIS_CATEGORY_COND_BR:
    case ZYDIS_CATEGORY_UNCOND_BR:
    case ZYDIS_CATEGORY_CALL: return false;
    default: break;
  }
  switch (insn.mnemonic) {
    case ZYDIS_MNEMONIC_BT:
    case ZYDIS_MNEMONIC_BTS:
    case ZYDIS_MNEMONIC_BTR:
    case ZYDIS_MNEMONIC_BTC: return false;
    default: break;
  }
  bool memory = false;
  return general_operands(insn, ops, memory) && memory;
}

// DecodedInstruction::simd_computation's extensions (isa sets that mix in MMX or x87 state,
// MXCSR's LDMXCSR/STMXCSR, and everything VEX/EVEX-encoded are not among them).
SimdIsa simd_isa(ZydisISASet set) {
  switch (set) {
    case ZYDIS_ISA_SET_SSE: return SimdIsa::kSse;
    case ZYDIS_ISA_SET_SSE2: return SimdIsa::kSse2;
    case ZYDIS_ISA_SET_SSE3: return SimdIsa::kSse3;
    case ZYDIS_ISA_SET_SSSE3: return SimdIsa::kSsse3;
    case ZYDIS_ISA_SET_SSE4: return SimdIsa::kSse41;
    case ZYDIS_ISA_SET_SSE42: return SimdIsa::kSse42;
    default: return SimdIsa::kNone;
  }
}

// The exception types without SIMD floating-point exceptions (SDM vol. 2 §2.4: 1 aligned
// moves, 4 full-width integer and logical operations, 5 narrower ones, 7 without memory).
bool no_floating_point_exception(ZydisExceptionClass c) {
  return c == ZYDIS_EXCEPTION_CLASS_SSE1 || c == ZYDIS_EXCEPTION_CLASS_SSE4 ||
         c == ZYDIS_EXCEPTION_CLASS_SSE5 || c == ZYDIS_EXCEPTION_CLASS_SSE7;
}

// Types 1 and 4 want a 16-byte operand 16-byte aligned in their legacy SSE form, except these
// (their own pages in the SDM say so).
bool unaligned_allowed(ZydisMnemonic m) {
  switch (m) {
    case ZYDIS_MNEMONIC_MOVUPS:
    case ZYDIS_MNEMONIC_MOVUPD:
    case ZYDIS_MNEMONIC_MOVDQU:
    case ZYDIS_MNEMONIC_LDDQU:
    case ZYDIS_MNEMONIC_PCMPESTRI:
    case ZYDIS_MNEMONIC_PCMPESTRM:
    case ZYDIS_MNEMONIC_PCMPISTRI:
    case ZYDIS_MNEMONIC_PCMPISTRM: return true;
    default: return false;
  }
}

// Fills DecodedInstruction's simd_* fields.
void classify_simd(const ZydisDecodedInstruction& insn, const ZydisDecodedOperand* ops,
                   DecodedInstruction& out) {
  if (insn.encoding != ZYDIS_INSTRUCTION_ENCODING_LEGACY ||
      (insn.attributes & ZYDIS_ATTRIB_HAS_LOCK) || insn.mnemonic == ZYDIS_MNEMONIC_MASKMOVDQU)
    return;
  const SimdIsa isa = simd_isa(insn.meta.isa_set);
  if (isa == SimdIsa::kNone || !no_floating_point_exception(insn.meta.exception_class)) return;
  bool xmm = false, aligned = false;
  for (uint8_t i = 0; i < insn.operand_count; ++i) {
    const ZydisDecodedOperand& op = ops[i];
    switch (op.type) {
      case ZYDIS_OPERAND_TYPE_IMMEDIATE: break;
      case ZYDIS_OPERAND_TYPE_REGISTER:
        if (ZydisRegisterGetClass(op.reg.value) == ZYDIS_REGCLASS_XMM) {
          xmm = true;
          break;
        }
        if (!general_or_flags(op.reg.value)) return;
        break;
      case ZYDIS_OPERAND_TYPE_MEMORY:
        if (op.mem.type != ZYDIS_MEMOP_TYPE_MEM) return;
        aligned = aligned || (op.size == 128 && !unaligned_allowed(insn.mnemonic) &&
                              insn.meta.exception_class != ZYDIS_EXCEPTION_CLASS_SSE5);
        break;
      default: return;
    }
  }
  if (!xmm) return;
  out.simd_computation = true;
  out.simd_isa = isa;
  out.simd_aligned = aligned;
}

// DecodedInstruction::emulator_computation: what computes in general registers and memory, LOCK
// allowed, DIV/IDIV (#DE), XADD and CMPXCHG too; branches are classed apart.
bool emulator_computation(const ZydisDecodedInstruction& insn, const ZydisDecodedOperand* ops) {
  switch (insn.mnemonic) {
    case ZYDIS_MNEMONIC_DIV:
    case ZYDIS_MNEMONIC_IDIV:
    case ZYDIS_MNEMONIC_XADD:
    case ZYDIS_MNEMONIC_CMPXCHG: break;
    default:
      if (!register_computation(insn.mnemonic)) return false;
  }
  switch (insn.meta.category) {
    case ZYDIS_CATEGORY_COND_BR:
    case ZYDIS_CATEGORY_UNCOND_BR:
    case ZYDIS_CATEGORY_CALL:
    case ZYDIS_CATEGORY_RET: return false;
    default: break;
  }
  bool memory = false;
  return general_operands(insn, ops, memory);
}

// General register n (RAX 0 ... R15 15) when `reg` is that 64-bit register, else -1.
int8_t gpr64_index(ZydisRegister reg) {
  if (reg < ZYDIS_REGISTER_RAX || reg > ZYDIS_REGISTER_R15) return -1;
  return static_cast<int8_t>(reg - ZYDIS_REGISTER_RAX);
}

// Bit n for general register n holding `reg` (any width); 0 for others.
uint16_t gpr_bit(ZydisRegister reg) {
  if (reg == ZYDIS_REGISTER_NONE) return 0;
  const int8_t n = gpr64_index(ZydisRegisterGetLargestEnclosing(ZYDIS_MACHINE_MODE_LONG_64, reg));
  return n < 0 ? 0 : static_cast<uint16_t>(1u << n);
}

constexpr int8_t kRspIndex = 4;

// DecodedInstruction::adjusted_gpr / adjustment: the register the instruction only moves by a
// constant, or nothing.
void constant_adjustment(const ZydisDecodedInstruction& insn, const ZydisDecodedOperand* ops,
                         DecodedInstruction& out) {
  const bool near = insn.meta.branch_type != ZYDIS_BRANCH_TYPE_FAR;
  auto set = [&](int8_t gpr, int64_t by) {
    if (gpr < 0) return;
    out.adjusted_gpr = gpr;
    out.adjustment = by;
  };
  const int8_t first = insn.operand_count > 0 && ops[0].type == ZYDIS_OPERAND_TYPE_REGISTER
                           ? gpr64_index(ops[0].reg.value)
                           : -1;
  switch (insn.mnemonic) {
    case ZYDIS_MNEMONIC_PUSH:
      if (insn.operand_width == 64) set(kRspIndex, -8);
      break;
    case ZYDIS_MNEMONIC_POP:
      if (insn.operand_width == 64 && first != kRspIndex) set(kRspIndex, 8);
      break;
    case ZYDIS_MNEMONIC_CALL:
      if (near) set(kRspIndex, -8);
      break;
    case ZYDIS_MNEMONIC_RET:
      if (near && insn.operand_width == 64)
        set(kRspIndex, 8 + (ops[0].type == ZYDIS_OPERAND_TYPE_IMMEDIATE ? ops[0].imm.value.u : 0));
      break;
    case ZYDIS_MNEMONIC_ADD:
    case ZYDIS_MNEMONIC_SUB:
      if (first >= 0 && insn.operand_width == 64 && ops[1].type == ZYDIS_OPERAND_TYPE_IMMEDIATE) {
        const int64_t imm = ops[1].imm.value.s;
        set(first, insn.mnemonic == ZYDIS_MNEMONIC_ADD ? imm : -imm);
      }
      break;
    case ZYDIS_MNEMONIC_INC:
    case ZYDIS_MNEMONIC_DEC:
      if (first >= 0 && insn.operand_width == 64)
        set(first, insn.mnemonic == ZYDIS_MNEMONIC_INC ? 1 : -1);
      break;
    case ZYDIS_MNEMONIC_LEA:
      if (first >= 0 && insn.operand_width == 64 && insn.address_width == 64 &&
          ops[1].mem.base == ops[0].reg.value && ops[1].mem.index == ZYDIS_REGISTER_NONE)
        set(first, ops[1].mem.disp.has_displacement ? ops[1].mem.disp.value : 0);
      break;
    default: break;
  }
  if (out.adjusted_gpr >= 0) out.gprs_written &= static_cast<uint16_t>(~(1u << out.adjusted_gpr));
}

}  // namespace

uint64_t& general_register(GuestRegisters& r, int n) {
  switch (n) {
    case 0: return r.rax;
    case 1: return r.rcx;
    case 2: return r.rdx;
    case 3: return r.rbx;
    case 4: return r.rsp;
    case 5: return r.rbp;
    case 6: return r.rsi;
    case 7: return r.rdi;
    case 8: return r.r8;
    case 9: return r.r9;
    case 10: return r.r10;
    case 11: return r.r11;
    case 12: return r.r12;
    case 13: return r.r13;
    case 14: return r.r14;
    case 15: return r.r15;
    default: throw std::out_of_range("general register " + std::to_string(n));
  }
}

InstructionDecoder::InstructionDecoder() {
  ZydisDecoderInit(&decoder_, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
}

std::string InstructionDecoder::mnemonic_name(ZydisMnemonic mnemonic) {
  const char* s = ZydisMnemonicGetString(mnemonic);
  return s ? s : "?";
}

ControlFlow InstructionDecoder::control_flow(const ZydisDecodedInstruction& insn,
                                             const ZydisDecodedOperand* ops,
                                             const GuestRegisters& regs) const {
  ControlFlow flow;
  auto jump = [&](uint64_t target) {
    flow.kind = ControlFlow::Kind::kJump;
    flow.target = target;
    return flow;
  };
  switch (insn.mnemonic) {
    case ZYDIS_MNEMONIC_SYSCALL: flow.kind = ControlFlow::Kind::kSyscall; return flow;
    case ZYDIS_MNEMONIC_INT3:
      flow.kind = ControlFlow::Kind::kInterrupt, flow.vector = 3;
      return flow;
    case ZYDIS_MNEMONIC_INT1:
      flow.kind = ControlFlow::Kind::kInterrupt, flow.vector = 1;
      return flow;
    case ZYDIS_MNEMONIC_INT:
      flow.kind = ControlFlow::Kind::kInterrupt;
      flow.vector = static_cast<uint8_t>(ops[0].imm.value.u);
      return flow;
    case ZYDIS_MNEMONIC_IRET:
    case ZYDIS_MNEMONIC_IRETD:
    case ZYDIS_MNEMONIC_IRETQ:
    case ZYDIS_MNEMONIC_SYSENTER:
    case ZYDIS_MNEMONIC_SYSEXIT:
    case ZYDIS_MNEMONIC_SYSRET: flow.kind = ControlFlow::Kind::kUnknown; return flow;
    default: break;
  }
  if (vendor_dependent_branch(insn)) {
    flow.kind = ControlFlow::Kind::kUnknown;
    return flow;
  }
  const bool far = insn.meta.branch_type == ZYDIS_BRANCH_TYPE_FAR;
  switch (insn.meta.category) {
    case ZYDIS_CATEGORY_COND_BR:
    case ZYDIS_CATEGORY_UNCOND_BR:
    case ZYDIS_CATEGORY_CALL: {
      if (far) break;
      const ZydisDecodedOperand& op = ops[0];
      if (insn.meta.category == ZYDIS_CATEGORY_COND_BR && !taken(insn, regs)) return flow;
      if (op.type == ZYDIS_OPERAND_TYPE_IMMEDIATE && op.imm.is_relative) {
        uint64_t target = 0;
        if (ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&insn, &op, regs.rip, &target)))
          return jump(target);
        break;
      }
      if (op.type == ZYDIS_OPERAND_TYPE_REGISTER) return jump(register_value(op.reg.value, regs));
      if (op.type == ZYDIS_OPERAND_TYPE_MEMORY && op.size == 64) {
        fill_context(regs, context_);
        uint64_t address = 0;
        if (!ZYAN_SUCCESS(ZydisCalcAbsoluteAddressEx(&insn, &op, regs.rip, &context_, &address)))
          break;
        if (op.mem.segment == ZYDIS_REGISTER_FS) address += regs.fs_base;
        if (op.mem.segment == ZYDIS_REGISTER_GS) address += regs.gs_base;
        flow.kind = ControlFlow::Kind::kIndirect;
        flow.pointer = address;
        return flow;
      }
      break;
    }
    case ZYDIS_CATEGORY_RET:
      if (far || insn.operand_width != 64) break;
      flow.kind = ControlFlow::Kind::kIndirect;
      flow.pointer = regs.rsp;
      return flow;
    default: return flow;  // falls through (faulting instructions too: they never get there)
  }
  flow.kind = ControlFlow::Kind::kUnknown;
  return flow;
}

std::optional<DecodedInstruction> InstructionDecoder::decode(std::span<const uint8_t> bytes,
                                                             const GuestRegisters& regs) const {
  // Made at the first decode: a vCPU that never steps does not pay for (or touch) its ~290 KiB.
  if (cache_.empty()) cache_.resize(kCacheSlots);
  Cached& c = cache_[(regs.rip ^ (regs.rip >> 8)) % kCacheSlots];
  if (c.rip == regs.rip && c.length <= bytes.size() &&
      std::memcmp(c.bytes.data(), bytes.data(), c.length) == 0) {
    ++cache_hits_;
  } else {
    c.rip = ~0ull;
    if (!ZYAN_SUCCESS(
            ZydisDecoderDecodeFull(&decoder_, bytes.data(), bytes.size(), &c.insn, c.ops)))
      return std::nullopt;
    c.rip = regs.rip;
    c.length = c.insn.length;
    std::memcpy(c.bytes.data(), bytes.data(), c.length);
  }
  const ZydisDecodedInstruction& insn = c.insn;
  const ZydisDecodedOperand* ops = c.ops;

  DecodedInstruction out;
  out.length = insn.length;
  out.mnemonic = insn.mnemonic;
  out.branch = classify(insn);
  out.lwp_instruction =
      insn.mnemonic == ZYDIS_MNEMONIC_LLWPCB || insn.mnemonic == ZYDIS_MNEMONIC_SLWPCB;
  out.syscall = insn.mnemonic == ZYDIS_MNEMONIC_SYSCALL;
  out.completed_by_kvm = completed_by_kvm(insn.mnemonic);
  out.rep =
      insn.attributes & (ZYDIS_ATTRIB_HAS_REP | ZYDIS_ATTRIB_HAS_REPE | ZYDIS_ATTRIB_HAS_REPNE);
  out.rep_string = out.rep && is_string_instruction(insn.mnemonic);
  out.iret = insn.mnemonic == ZYDIS_MNEMONIC_IRET || insn.mnemonic == ZYDIS_MNEMONIC_IRETD ||
             insn.mnemonic == ZYDIS_MNEMONIC_IRETQ;
  out.sysret = insn.mnemonic == ZYDIS_MNEMONIC_SYSRET || insn.mnemonic == ZYDIS_MNEMONIC_SYSEXIT;
  out.flow = control_flow(insn, ops, regs);
  out.segment_written = writes_segment(insn, ops);
  const bool vendor_dependent = vendor_dependent_branch(insn);
  out.trap_flag_safe = trap_flag_safe(insn, ops, out.flow);
  out.memory_computation = !out.trap_flag_safe && memory_computation(insn, ops);
  classify_simd(insn, ops, out);
  out.emulator_computation = emulator_computation(insn, ops);
  out.locked =
      (insn.attributes & ZYDIS_ATTRIB_HAS_LOCK) ||
      (insn.mnemonic == ZYDIS_MNEMONIC_XCHG && insn.operand_count > 1 &&
       (ops[0].type == ZYDIS_OPERAND_TYPE_MEMORY || ops[1].type == ZYDIS_OPERAND_TYPE_MEMORY));

  out.stack_push_pop =
      (insn.mnemonic == ZYDIS_MNEMONIC_PUSH || insn.mnemonic == ZYDIS_MNEMONIC_POP) &&
      insn.operand_width == 64 && insn.operand_count > 0 &&
      (ops[0].type == ZYDIS_OPERAND_TYPE_IMMEDIATE ||
       (ops[0].type == ZYDIS_OPERAND_TYPE_REGISTER && gpr64_index(ops[0].reg.value) >= 0));
  bool context_filled = false;
  for (uint8_t i = 0; i < insn.operand_count; ++i) {
    const ZydisDecodedOperand& op = ops[i];
    if (op.type == ZYDIS_OPERAND_TYPE_REGISTER && (op.actions & ZYDIS_OPERAND_ACTION_MASK_WRITE))
      out.gprs_written |= gpr_bit(op.reg.value);
    if (op.type == ZYDIS_OPERAND_TYPE_MEMORY)
      out.gprs_addressing |= gpr_bit(op.mem.base) | gpr_bit(op.mem.index);
    if (out.branch != pmu::BranchKind::kNone && op.type == ZYDIS_OPERAND_TYPE_IMMEDIATE &&
        op.imm.is_relative)
      out.relative_branch = true;
    if (out.branch != pmu::BranchKind::kNone && !vendor_dependent &&
        op.type == ZYDIS_OPERAND_TYPE_IMMEDIATE && op.imm.is_relative) {
      uint64_t target = 0;
      if (ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&insn, &op, regs.rip, &target)))
        out.direct_target = target;
    }
    // Only real data accesses: LEA's address generation and prefetch-like hints (AGEN/MIB)
    // touch no data. Implicit stack operands (push/pop/call/ret) are included: the instruction
    // itself reads or writes them.
    if (op.type != ZYDIS_OPERAND_TYPE_MEMORY || op.mem.type != ZYDIS_MEMOP_TYPE_MEM) continue;
    out.reads_memory = out.reads_memory || (op.actions & ZYDIS_OPERAND_ACTION_MASK_READ);
    out.writes_memory = out.writes_memory || (op.actions & ZYDIS_OPERAND_ACTION_MASK_WRITE);
    if (!context_filled) fill_context(regs, context_), context_filled = true;
    uint64_t address = 0;
    if (!ZYAN_SUCCESS(ZydisCalcAbsoluteAddressEx(&insn, &op, regs.rip, &context_, &address)))
      continue;
    if (op.mem.segment == ZYDIS_REGISTER_FS) address += regs.fs_base;
    if (op.mem.segment == ZYDIS_REGISTER_GS) address += regs.gs_base;
    // Zydis names a push's hidden stack operand by RSP before the push; the store goes below it.
    if (op.visibility == ZYDIS_OPERAND_VISIBILITY_HIDDEN && op.mem.base == ZYDIS_REGISTER_RSP &&
        (op.actions & ZYDIS_OPERAND_ACTION_MASK_WRITE) &&
        (insn.mnemonic == ZYDIS_MNEMONIC_PUSH || insn.mnemonic == ZYDIS_MNEMONIC_PUSHF ||
         insn.mnemonic == ZYDIS_MNEMONIC_PUSHFQ || insn.mnemonic == ZYDIS_MNEMONIC_CALL))
      address -= op.size / 8;
    const MemoryAccess access{address, static_cast<uint32_t>(op.size / 8)};
    if ((op.actions & ZYDIS_OPERAND_ACTION_MASK_READ) &&
        out.load_count < DecodedInstruction::kMaxAccesses)
      out.loads[out.load_count++] = access;
    if ((op.actions & ZYDIS_OPERAND_ACTION_MASK_WRITE) &&
        out.store_count < DecodedInstruction::kMaxAccesses)
      out.stores[out.store_count++] = access;
  }
  constant_adjustment(insn, ops, out);
  return out;
}

}  // namespace vmm
