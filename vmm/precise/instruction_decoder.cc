#include "vmm/precise/instruction_decoder.h"

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
  for (const auto& [reg, value] : regs) {
    // Zydis resolves sub-registers (eax, r8d, ...) through their 64-bit enclosing register only
    // when asked for that exact enum, so fill the narrower views too.
    ctx.values[reg] = value;
    const ZydisRegister r32 = ZydisRegisterEncode(ZYDIS_REGCLASS_GPR32, ZydisRegisterGetId(reg));
    if (r32 != ZYDIS_REGISTER_NONE) ctx.values[r32] = value & 0xFFFFFFFFu;
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

}  // namespace

InstructionDecoder::InstructionDecoder() : cache_(kCacheSlots) {
  ZydisDecoderInit(&decoder_, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
}

std::string InstructionDecoder::mnemonic_name(ZydisMnemonic mnemonic) {
  const char* s = ZydisMnemonicGetString(mnemonic);
  return s ? s : "?";
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
