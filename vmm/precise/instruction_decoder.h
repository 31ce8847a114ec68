// Decodes one retired guest instruction for the precise counting backend (DESIGN §4.7): its
// length, its branch class as LWP §4.2 defines branches, and the linear addresses of the memory
// it reads and writes, computed from the registers *before* the instruction executed.
// Uses Zydis (libzydis-dev 4.0); no KVM dependency, so it is tested from byte strings.
#pragma once

#include <Zydis/Zydis.h>

#include <array>
#include <cstdint>
#include <optional>
#include <vector>
#include <span>
#include <string>

#include "pmu/retired_instruction.h"

namespace vmm {

// The architectural state the decoder needs (64-bit mode).
struct GuestRegisters {
  uint64_t rax = 0, rbx = 0, rcx = 0, rdx = 0, rsi = 0, rdi = 0, rsp = 0, rbp = 0;
  uint64_t r8 = 0, r9 = 0, r10 = 0, r11 = 0, r12 = 0, r13 = 0, r14 = 0, r15 = 0;
  uint64_t rip = 0, rflags = 0;
  uint64_t fs_base = 0, gs_base = 0;
  uint64_t cr3 = 0;  // the address space (steppers use it to tell tasks apart; decoding ignores it)
  template <class Archive>
  void archive(Archive& a) {
    a(rax, rbx, rcx, rdx, rsi, rdi, rsp, rbp, r8, r9, r10, r11, r12, r13, r14, r15, rip, rflags,
      fs_base, gs_base, cr3);
  }
};

// General register n in x86 encoding order (0 RAX, 1 RCX, 2 RDX, 3 RBX, 4 RSP, 5 RBP, 6 RSI,
// 7 RDI, 8-15 R8-R15).
uint64_t& general_register(GuestRegisters& r, int n);

// The general registers, RIP and RFLAGS of any register block that names them as x86 does
// (KVM's kvm_regs, the bundled kernel's pmuvm_trap_frame); the bases and CR3 are the caller's.
template <typename Registers>
GuestRegisters general_registers(const Registers& r) {
  GuestRegisters g;
  g.rax = r.rax, g.rbx = r.rbx, g.rcx = r.rcx, g.rdx = r.rdx;
  g.rsi = r.rsi, g.rdi = r.rdi, g.rsp = r.rsp, g.rbp = r.rbp;
  g.r8 = r.r8, g.r9 = r.r9, g.r10 = r.r10, g.r11 = r.r11;
  g.r12 = r.r12, g.r13 = r.r13, g.r14 = r.r14, g.r15 = r.r15;
  g.rip = r.rip, g.rflags = r.rflags;
  return g;
}
// The other way: `g`'s general registers, RIP and RFLAGS into `r` (its other fields kept).
template <typename Registers>
void set_general_registers(Registers& r, const GuestRegisters& g) {
  r.rax = g.rax, r.rbx = g.rbx, r.rcx = g.rcx, r.rdx = g.rdx;
  r.rsi = g.rsi, r.rdi = g.rdi, r.rsp = g.rsp, r.rbp = g.rbp;
  r.r8 = g.r8, r.r9 = g.r9, r.r10 = g.r10, r.r11 = g.r11;
  r.r12 = g.r12, r.r13 = g.r13, r.r14 = g.r14, r.r15 = g.r15;
  r.rip = g.rip, r.rflags = g.rflags;
}

struct MemoryAccess {
  uint64_t address = 0;  // linear, segment base included
  uint32_t size = 0;     // bytes
};

// Where control goes after an instruction, resolved from the registers before it runs: the KVM
// stepper puts its breakpoint there (DESIGN §4.7). An instruction that faults instead of retiring
// never gets there; the stepper catches the kernel's return instead.
struct ControlFlow {
  enum class Kind : uint8_t {
    kNext,       // falls through to rip + length (a REP string instruction too: it retires once)
    kJump,       // to `target` (direct jumps and calls; conditional branches and register-
                 // indirect ones resolved here)
    kIndirect,   // to the 8-byte address stored at `pointer` (RET, JMP/CALL through memory)
    kSyscall,    // SYSCALL: into the kernel at IA32_LSTAR
    kInterrupt,  // INT n, INT3, INT1: into the kernel through IDT gate `vector`
    kUnknown,    // far transfers, IRET, SYSENTER: not followed (the stepper single-steps it)
  };
  Kind kind = Kind::kNext;
  uint64_t target = 0;
  uint64_t pointer = 0;
  uint8_t vector = 0;
};

// The SSE extension a SIMD instruction belongs to (a CPU without it raises #UD).
enum class SimdIsa : uint8_t { kNone, kSse, kSse2, kSse3, kSsse3, kSse41, kSse42 };

struct DecodedInstruction {
  static constexpr int kMaxAccesses = 2;

  uint8_t length = 0;
  ZydisMnemonic mnemonic = ZYDIS_MNEMONIC_INVALID;
  pmu::BranchKind branch = pmu::BranchKind::kNone;
  std::optional<uint64_t> direct_target;  // for RIP-relative branches
  bool relative_branch = false;  // its target is RIP + an immediate (also without direct_target)
  bool lwp_instruction = false;  // LLWPCB / SLWPCB: emulated via #UD, never retire
  bool syscall = false;          // SYSCALL: retires at CPL 3, not a branch (§4.2)
  std::array<MemoryAccess, kMaxAccesses> loads{};
  uint8_t load_count = 0;
  std::array<MemoryAccess, kMaxAccesses> stores{};
  uint8_t store_count = 0;
  // Some data operand is read / written (also where its address could not be computed, or
  // beyond kMaxAccesses): MEM_INST_RETIRED's loads and stores.
  bool reads_memory = false;
  bool writes_memory = false;
  ControlFlow flow;
  // KVM intercepts it and completes it itself (CPUID, port I/O, RDPMC, VMMCALL/VMCALL): when the
  // guest's own TF is set, KVM queues the single-step #DB into the guest without a debug exit.
  bool completed_by_kvm = false;
  bool rep = false;  // a REP/REPE/REPNE prefix
  // A string instruction with one: it runs all its iterations and retires once (DESIGN §4.7);
  // under TF it traps after each iteration with RIP unchanged, and those traps are not
  // retirements.
  bool rep_string = false;
  // It only computes in general registers: nothing of the guest can see a TF while it runs (no
  // exception frame, no memory, no read of RFLAGS.TF), so the KVM stepper may single-step it.
  bool trap_flag_safe = false;
  // Not trap_flag_safe, but only for its data memory operands: it computes in general registers
  // and memory and can fault only on those accesses (#PF, #GP for a non-canonical address, #AC).
  // A block stepper may run it inside a block where it can prove the accesses (DESIGN §4.7).
  bool memory_computation = false;
  // General registers (bit n: RAX 0, RCX 1, RDX 2, RBX 3, RSP 4, RBP 5, RSI 6, RDI 7, R8-R15
  // 8-15) it writes (explicit and implicit operands, any width), and those its memory operands
  // compute their addresses from (base, index).
  uint16_t gprs_written = 0;
  uint16_t gprs_addressing = 0;
  // A register it only moves by a constant (PUSH/POP/CALL/RET on RSP, ADD/SUB of an immediate,
  // INC/DEC, LEA r, [r + disp] on 64-bit registers): `adjusted_gpr` (-1: none) gains
  // `adjustment`, and is not in gprs_written. A block stepper follows such registers through a
  // block and so knows the addresses the next instructions use.
  int8_t adjusted_gpr = -1;
  int64_t adjustment = 0;
  // PUSH or POP of a 64-bit register or immediate: one stack access, it can fault only there.
  bool stack_push_pop = false;
  // It loads a segment register or an FS/GS base (MOV/POP to a segment register, LFS/LGS/LSS,
  // WRFSBASE/WRGSBASE): FS- and GS-relative addresses after it use another base.
  bool segment_written = false;
  // It computes in general registers and memory only, as trap_flag_safe and memory_computation
  // instructions do, but also with a LOCK prefix, and DIV/IDIV (#DE), XADD and CMPXCHG: an
  // emulator that raises exceptions precisely runs it exactly (emulation_policy.h). Not
  // branches. `locked`: a LOCK prefix or XCHG with memory (atomic against other processors).
  bool emulator_computation = false;
  bool locked = false;
  // A legacy-encoded SSE..SSE4.2 instruction that moves or computes in XMM and general registers
  // and memory without a floating-point exception (the SDM's exception types 1, 4, 5 and 7, vol.
  // 2 §2.4): it reads and writes no MXCSR flag, so whoever carries the XMM registers runs it
  // exactly (the emulator, emulation_policy.h). `simd_isa`: the extension the CPU needs for it.
  // `simd_aligned`: its 16-byte memory operand must be 16-byte aligned (#GP otherwise).
  bool simd_computation = false;
  SimdIsa simd_isa = SimdIsa::kNone;
  bool simd_aligned = false;
  bool iret = false;    // IRET/IRETD/IRETQ
  bool sysret = false;  // SYSRET (64-bit when REX.W) / SYSEXIT: only ever returns to user mode

  uint64_t fall_through(uint64_t rip) const { return rip + length; }
};

class InstructionDecoder {
 public:
  InstructionDecoder();

  // Decodes the instruction at regs.rip from `bytes` (up to 15 bytes fetched there). nullopt if
  // the bytes are not a valid 64-bit-mode instruction.
  std::optional<DecodedInstruction> decode(std::span<const uint8_t> bytes,
                                           const GuestRegisters& regs) const;

  // Mnemonic text, for reports.
  static std::string mnemonic_name(ZydisMnemonic mnemonic);

  uint64_t cache_hits() const { return cache_hits_; }

 private:
  ControlFlow control_flow(const ZydisDecodedInstruction& insn, const ZydisDecodedOperand* ops,
                           const GuestRegisters& regs) const;

  // Zydis's full decode is the largest part of a step's VMM-side cost (perf, nested host), and a
  // stepped program runs the same few instructions over and over. So the last decode at each of
  // 256 RIP slots is kept with its bytes. Decoding depends only on the bytes (64-bit mode), and x86
  // decoding of an instruction's own `length` bytes does not depend on what follows them, so equal
  // bytes give the identical result: modified code simply misses. Addresses are computed anew.
  struct Cached {
    uint64_t rip = ~0ull;
    uint8_t length = 0;
    std::array<uint8_t, 15> bytes{};
    ZydisDecodedInstruction insn{};
    ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT]{};
  };
  static constexpr size_t kCacheSlots = 256;

  ZydisDecoder decoder_;
  mutable std::vector<Cached> cache_;
  // Register values for Zydis's address computation: filled only for instructions with a memory
  // operand (the context is 2 KiB; only the GPR and RIP entries are ever read).
  mutable ZydisRegisterContext context_{};
  mutable uint64_t cache_hits_ = 0;
};

}  // namespace vmm
