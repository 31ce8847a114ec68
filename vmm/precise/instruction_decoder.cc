#include "vmm/precise/instruction_decoder.h"

#include <array>

#include <cstring>

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
    case ZYDIS_CATEGORY_CALL:
      return pmu::BranchKind::kCall;
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

// Whether a conditional branch is taken, from RFLAGS and RCX before it.
bool taken(const ZydisDecodedInstruction& insn, const GuestRegisters& r) {
  const uint64_t f = r.rflags;
  const bool cf = f & kCF, pf = f & kPF, zf = f & kZF, sf = f & kSF, of = f & kOF;
  // JrCXZ and LOOP use RCX, or ECX/CX with an address-size prefix.
  const uint64_t count_mask = insn.address_width == 64 ? ~0ull
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
    case ZYDIS_MNEMONIC_VMCALL:
      return true;
    default:
      return false;
  }
}

// The string instructions (MOVS, STOS, LODS, SCAS, CMPS, INS, OUTS), which a REP prefix repeats.
bool is_string_instruction(ZydisMnemonic mnemonic) {
  switch (mnemonic) {
    case ZYDIS_MNEMONIC_MOVSB: case ZYDIS_MNEMONIC_MOVSW: case ZYDIS_MNEMONIC_MOVSD:
    case ZYDIS_MNEMONIC_MOVSQ: case ZYDIS_MNEMONIC_STOSB: case ZYDIS_MNEMONIC_STOSW:
    case ZYDIS_MNEMONIC_STOSD: case ZYDIS_MNEMONIC_STOSQ: case ZYDIS_MNEMONIC_LODSB:
    case ZYDIS_MNEMONIC_LODSW: case ZYDIS_MNEMONIC_LODSD: case ZYDIS_MNEMONIC_LODSQ:
    case ZYDIS_MNEMONIC_SCASB: case ZYDIS_MNEMONIC_SCASW: case ZYDIS_MNEMONIC_SCASD:
    case ZYDIS_MNEMONIC_SCASQ: case ZYDIS_MNEMONIC_CMPSB: case ZYDIS_MNEMONIC_CMPSW:
    case ZYDIS_MNEMONIC_CMPSD: case ZYDIS_MNEMONIC_CMPSQ: case ZYDIS_MNEMONIC_INSB:
    case ZYDIS_MNEMONIC_INSW: case ZYDIS_MNEMONIC_INSD: case ZYDIS_MNEMONIC_OUTSB:
    case ZYDIS_MNEMONIC_OUTSW: case ZYDIS_MNEMONIC_OUTSD:
      return true;
    default:
      return false;
  }
}

}  // namespace

InstructionDecoder::InstructionDecoder() : cache_(kCacheSlots) {
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
    case ZYDIS_MNEMONIC_INT3: flow.kind = ControlFlow::Kind::kInterrupt, flow.vector = 3; return flow;
    case ZYDIS_MNEMONIC_INT1: flow.kind = ControlFlow::Kind::kInterrupt, flow.vector = 1; return flow;
    case ZYDIS_MNEMONIC_INT:
      flow.kind = ControlFlow::Kind::kInterrupt;
      flow.vector = static_cast<uint8_t>(ops[0].imm.value.u);
      return flow;
    case ZYDIS_MNEMONIC_IRET:
    case ZYDIS_MNEMONIC_IRETD:
    case ZYDIS_MNEMONIC_IRETQ:
    case ZYDIS_MNEMONIC_SYSENTER:
    case ZYDIS_MNEMONIC_SYSEXIT:
    case ZYDIS_MNEMONIC_SYSRET:
      flow.kind = ControlFlow::Kind::kUnknown;
      return flow;
    default: break;
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
        if (ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&insn, &op, regs.rip, &target))) return jump(target);
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
    default:
      return flow;  // falls through (faulting instructions too: they never get there)
  }
  flow.kind = ControlFlow::Kind::kUnknown;
  return flow;
}

std::optional<DecodedInstruction> InstructionDecoder::decode(std::span<const uint8_t> bytes,
                                                             const GuestRegisters& regs) const {
  Cached& c = cache_[(regs.rip ^ (regs.rip >> 8)) % kCacheSlots];
  if (c.rip == regs.rip && c.length <= bytes.size() &&
      std::memcmp(c.bytes.data(), bytes.data(), c.length) == 0) {
    ++cache_hits_;
  } else {
    c.rip = ~0ull;
    if (!ZYAN_SUCCESS(ZydisDecoderDecodeFull(&decoder_, bytes.data(), bytes.size(), &c.insn, c.ops)))
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
  out.lwp_instruction = insn.mnemonic == ZYDIS_MNEMONIC_LLWPCB || insn.mnemonic == ZYDIS_MNEMONIC_SLWPCB;
  out.syscall = insn.mnemonic == ZYDIS_MNEMONIC_SYSCALL;
  out.completed_by_kvm = completed_by_kvm(insn.mnemonic);
  out.rep = insn.attributes & (ZYDIS_ATTRIB_HAS_REP | ZYDIS_ATTRIB_HAS_REPE | ZYDIS_ATTRIB_HAS_REPNE);
  out.rep_string = out.rep && is_string_instruction(insn.mnemonic);
  out.iret = insn.mnemonic == ZYDIS_MNEMONIC_IRET || insn.mnemonic == ZYDIS_MNEMONIC_IRETD ||
             insn.mnemonic == ZYDIS_MNEMONIC_IRETQ;
  out.sysret = insn.mnemonic == ZYDIS_MNEMONIC_SYSRET || insn.mnemonic == ZYDIS_MNEMONIC_SYSEXIT;
  out.flow = control_flow(insn, ops, regs);

  bool context_filled = false;
  for (uint8_t i = 0; i < insn.operand_count; ++i) {
    const ZydisDecodedOperand& op = ops[i];
    if (out.branch != pmu::BranchKind::kNone && op.type == ZYDIS_OPERAND_TYPE_IMMEDIATE &&
        op.imm.is_relative) {
      uint64_t target = 0;
      if (ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&insn, &op, regs.rip, &target)))
        out.direct_target = target;
    }
    // Only real data accesses: LEA's address generation and prefetch-like hints (AGEN/MIB)
    // touch no data. Implicit stack operands (push/pop/call/ret) are included: the instruction
    // itself reads or writes them.
    if (op.type != ZYDIS_OPERAND_TYPE_MEMORY || op.mem.type != ZYDIS_MEMOP_TYPE_MEM) continue;
    if (!context_filled) fill_context(regs, context_), context_filled = true;
    uint64_t address = 0;
    if (!ZYAN_SUCCESS(ZydisCalcAbsoluteAddressEx(&insn, &op, regs.rip, &context_, &address))) continue;
    if (op.mem.segment == ZYDIS_REGISTER_FS) address += regs.fs_base;
    if (op.mem.segment == ZYDIS_REGISTER_GS) address += regs.gs_base;
    const MemoryAccess access{address, static_cast<uint32_t>(op.size / 8)};
    if ((op.actions & ZYDIS_OPERAND_ACTION_MASK_READ) && out.load_count < DecodedInstruction::kMaxAccesses)
      out.loads[out.load_count++] = access;
    if ((op.actions & ZYDIS_OPERAND_ACTION_MASK_WRITE) &&
        out.store_count < DecodedInstruction::kMaxAccesses)
      out.stores[out.store_count++] = access;
  }
  return out;
}

}  // namespace vmm
