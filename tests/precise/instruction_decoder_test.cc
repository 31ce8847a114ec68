// The precise backend's decoder: LWP §4.2 branch classes, direct targets, and the linear
// addresses of loads/stores from pre-instruction registers, for hand-assembled byte strings.
#include "vmm/precise/instruction_decoder.h"

#include <gtest/gtest.h>

#include <vector>

namespace vmm {
namespace {

using pmu::BranchKind;

class DecoderTest : public ::testing::Test {
 protected:
  DecodedInstruction decode(std::vector<uint8_t> bytes) {
    auto d = decoder_.decode(bytes, regs_);
    EXPECT_TRUE(d.has_value());
    return d.value_or(DecodedInstruction{});
  }
  InstructionDecoder decoder_;
  GuestRegisters regs_{.rax = 0x1111,
                       .rbx = 0x2000,
                       .rcx = 3,
                       .rsi = 0x5000,
                       .rdi = 0x6000,
                       .rsp = 0x7FF0,
                       .rip = 0x400000,
                       .fs_base = 0x9000};
};

TEST_F(DecoderTest, LoadThroughRegister) {
  auto d = decode({0x48, 0x8b, 0x03});  // mov rax, [rbx]
  EXPECT_EQ(d.length, 3);
  EXPECT_EQ(d.branch, BranchKind::kNone);
  ASSERT_EQ(d.load_count, 1);
  EXPECT_EQ(d.loads[0].address, 0x2000u);
  EXPECT_EQ(d.loads[0].size, 8u);
  EXPECT_EQ(d.store_count, 0);
}

TEST_F(DecoderTest, StoreIsNotALoad) {
  auto d = decode({0x89, 0x07});  // mov [rdi], eax
  EXPECT_EQ(d.load_count, 0);
  ASSERT_EQ(d.store_count, 1);
  EXPECT_EQ(d.stores[0].address, 0x6000u);
  EXPECT_EQ(d.stores[0].size, 4u);
}

TEST_F(DecoderTest, LeaTouchesNoMemory) {
  auto d = decode({0x48, 0x8d, 0x04, 0x18});  // lea rax, [rax+rbx]
  EXPECT_EQ(d.load_count, 0);
  EXPECT_EQ(d.store_count, 0);
}

TEST_F(DecoderTest, RipRelativeAndFsRelativeLoads) {
  auto r = decode({0x48, 0x8b, 0x05, 0x10, 0x00, 0x00, 0x00});  // mov rax, [rip+0x10]
  ASSERT_EQ(r.load_count, 1);
  EXPECT_EQ(r.loads[0].address, 0x400000u + 7 + 0x10);
  auto f = decode({0x64, 0x48, 0x8b, 0x04, 0x25, 0x10, 0x00, 0x00, 0x00});  // mov rax, fs:[0x10]
  ASSERT_EQ(f.load_count, 1);
  EXPECT_EQ(f.loads[0].address, 0x9010u);
}

TEST_F(DecoderTest, ScaledIndexUses32BitViewsCorrectly) {
  auto d = decode({0x8b, 0x04, 0x8b});  // mov eax, [rbx+rcx*4]
  ASSERT_EQ(d.load_count, 1);
  EXPECT_EQ(d.loads[0].address, 0x2000u + 3 * 4);
}

TEST_F(DecoderTest, ConditionalBranchesIncludeJrcxzAndLoop) {
  auto jnz = decode({0x75, 0x05});
  EXPECT_EQ(jnz.branch, BranchKind::kConditional);
  EXPECT_EQ(jnz.direct_target, 0x400007u);
  EXPECT_EQ(jnz.fall_through(regs_.rip), 0x400002u);
  EXPECT_EQ(decode({0xe3, 0xfe}).branch, BranchKind::kConditional);  // jrcxz
  EXPECT_EQ(decode({0xe2, 0xfe}).branch, BranchKind::kConditional);  // loop
  EXPECT_EQ(decode({0xe1, 0xfe}).branch, BranchKind::kConditional);  // loope
  auto jcc32 = decode({0x0f, 0x84, 0x00, 0x01, 0x00, 0x00});         // je rel32
  EXPECT_EQ(jcc32.branch, BranchKind::kConditional);
  EXPECT_EQ(jcc32.direct_target, 0x400106u);
}

TEST_F(DecoderTest, DirectAndIndirectJumps) {
  auto jmp = decode({0xeb, 0xfe});
  EXPECT_EQ(jmp.branch, BranchKind::kDirectJump);
  EXPECT_EQ(jmp.direct_target, 0x400000u);
  EXPECT_EQ(decode({0xe9, 0x00, 0x00, 0x00, 0x00}).branch, BranchKind::kDirectJump);
  auto reg = decode({0xff, 0xe0});  // jmp rax
  EXPECT_EQ(reg.branch, BranchKind::kIndirectJump);
  EXPECT_FALSE(reg.direct_target.has_value());
  auto mem = decode({0xff, 0x24, 0x25, 0x00, 0x10, 0x00, 0x00});  // jmp [0x1000]
  EXPECT_EQ(mem.branch, BranchKind::kIndirectJump);
  ASSERT_EQ(mem.load_count, 1);
  EXPECT_EQ(mem.loads[0].address, 0x1000u);
}

TEST_F(DecoderTest, CallsAndReturnsTouchTheStack) {
  auto call = decode({0xe8, 0x10, 0x00, 0x00, 0x00});
  EXPECT_EQ(call.branch, BranchKind::kCall);
  EXPECT_EQ(call.direct_target, 0x400015u);
  EXPECT_EQ(call.load_count, 0);
  ASSERT_EQ(call.store_count, 1);
  EXPECT_EQ(call.stores[0].address, 0x7FF0u - 8) << "the return address goes below RSP";
  EXPECT_EQ(decode({0xff, 0xd0}).branch, BranchKind::kCall);  // call rax
  auto ret = decode({0xc3});
  EXPECT_EQ(ret.branch, BranchKind::kReturn);
  ASSERT_EQ(ret.load_count, 1);
  EXPECT_EQ(ret.loads[0].address, 0x7FF0u);
  EXPECT_EQ(decode({0xc2, 0x08, 0x00}).branch, BranchKind::kReturn);  // ret 8
}

TEST_F(DecoderTest, RingTransitionsAreNotBranches) {
  auto sys = decode({0x0f, 0x05});
  EXPECT_EQ(sys.branch, BranchKind::kNone);
  EXPECT_TRUE(sys.syscall);
  EXPECT_EQ(decode({0xcc}).branch, BranchKind::kNone);        // int3
  EXPECT_EQ(decode({0xcd, 0x80}).branch, BranchKind::kNone);  // int 0x80
  EXPECT_EQ(decode({0x0f, 0x34}).branch, BranchKind::kNone);  // sysenter
  EXPECT_EQ(decode({0x48, 0xcf}).branch, BranchKind::kNone);  // iretq
}

TEST_F(DecoderTest, LwpInstructionsAreRecognised) {
  auto ll = decode({0x8f, 0xe9, 0x78, 0x12, 0xc0});  // llwpcb rax (DESIGN §4.3)
  EXPECT_TRUE(ll.lwp_instruction);
  EXPECT_EQ(ll.length, 5);
  EXPECT_EQ(InstructionDecoder::mnemonic_name(ll.mnemonic), "llwpcb");
  EXPECT_TRUE(decode({0x8f, 0xe9, 0x78, 0x12, 0xc8}).lwp_instruction);  // slwpcb rax
  EXPECT_FALSE(decode({0x90}).lwp_instruction);
}

TEST_F(DecoderTest, StringAndStackInstructions) {
  auto movs = decode({0x48, 0xa5});  // movsq
  ASSERT_EQ(movs.load_count, 1);
  EXPECT_EQ(movs.loads[0].address, 0x5000u);
  ASSERT_EQ(movs.store_count, 1);
  EXPECT_EQ(movs.stores[0].address, 0x6000u);
  auto pop = decode({0x58});
  ASSERT_EQ(pop.load_count, 1);
  EXPECT_EQ(pop.loads[0].address, 0x7FF0u);
}

TEST_F(DecoderTest, InvalidBytesAreRejected) {
  std::vector<uint8_t> bad = {0x06};  // push es: invalid in 64-bit mode
  EXPECT_FALSE(decoder_.decode(bad, regs_).has_value());
  std::vector<uint8_t> truncated = {0x48, 0x8b};
  EXPECT_FALSE(decoder_.decode(truncated, regs_).has_value());
}

// Issue 37, case 8: an operand-size prefix on a near branch in 64-bit mode is ignored by Intel
// CPUs and honoured by AMD's (a 16-bit operand: rel16, the target truncated to 16 bits; even the
// length differs). Which one runs the guest is the host's business: such a branch has no
// computed successor (the stepper single-steps it and reads where it went) and never sits inside
// a block.
TEST_F(DecoderTest, NearBranchesWithAnOperandSizePrefixAreNotPredicted) {
  const std::vector<std::vector<uint8_t>> branches = {
      {0x66, 0xe8, 0x10, 0x00, 0x00, 0x00},        // call rel (rel16 on AMD)
      {0x66, 0xe9, 0x10, 0x00, 0x00, 0x00},        // jmp rel
      {0x66, 0xeb, 0x05},                          // jmp rel8 (the target truncated on AMD)
      {0x66, 0x0f, 0x84, 0x10, 0x00, 0x00, 0x00},  // jz rel
      {0x66, 0x74, 0x05},                          // jz rel8
      {0x66, 0xff, 0xe0},                          // jmp rax (ax on AMD)
      {0x66, 0xc3},                                // ret (pops 2 bytes on AMD and Intel)
  };
  regs_.rflags = 0x246;  // ZF: the conditional ones are taken
  for (const auto& bytes : branches) {
    SCOPED_TRACE(testing::PrintToString(bytes));
    const DecodedInstruction d = decode(bytes);
    EXPECT_EQ(d.flow.kind, ControlFlow::Kind::kUnknown);
    EXPECT_FALSE(d.trap_flag_safe);
    EXPECT_FALSE(d.memory_computation);
  }
  // Without the prefix: predicted as before.
  EXPECT_EQ(decode({0xeb, 0x05}).flow.kind, ControlFlow::Kind::kJump);
  EXPECT_EQ(decode({0x74, 0x05}).flow.kind, ControlFlow::Kind::kJump);
}

// Issue 37, case 3: what loads a segment register (and so may change the FS/GS base the next
// access adds) is known.
TEST_F(DecoderTest, SegmentLoadsAreNamed) {
  EXPECT_TRUE(decode({0x8e, 0xe0}).segment_written);                    // mov fs, eax
  EXPECT_TRUE(decode({0x8e, 0xe8}).segment_written);                    // mov gs, eax
  EXPECT_TRUE(decode({0x8e, 0xd0}).segment_written);                    // mov ss, eax
  EXPECT_TRUE(decode({0x0f, 0xa1}).segment_written);                    // pop fs
  EXPECT_TRUE(decode({0x0f, 0xb4, 0x07}).segment_written);              // lfs eax, [rdi]
  EXPECT_TRUE(decode({0xf3, 0x48, 0x0f, 0xae, 0xd0}).segment_written);  // wrfsbase rax
  EXPECT_TRUE(decode({0xf3, 0x48, 0x0f, 0xae, 0xd8}).segment_written);  // wrgsbase rax
  EXPECT_FALSE(decode({0x8c, 0xe0}).segment_written);                   // mov eax, fs (a read)
  EXPECT_FALSE(decode({0x48, 0x01, 0xd8}).segment_written);             // add rax, rbx
}

}  // namespace
}  // namespace vmm

namespace vmm {
namespace {

// The decode cache (per RIP, checked against the bytes): a hit computes addresses from the new
// registers; other bytes at the same RIP (modified code) decode anew; an invalid encoding is not
// cached as the old instruction.
TEST(DecoderCache, SameBytesHitWithFreshAddressesOtherBytesDecodeAnew) {
  InstructionDecoder decoder;
  GuestRegisters regs{.rbx = 0x2000, .rip = 0x400000};
  const std::vector<uint8_t> load = {0x48, 0x8b, 0x03, 0x90};  // mov rax, [rbx]; (nop follows)
  ASSERT_TRUE(decoder.decode(load, regs).has_value());
  EXPECT_EQ(decoder.cache_hits(), 0u);
  regs.rbx = 0x3000;
  const std::vector<uint8_t> other_tail = {0x48, 0x8b, 0x03, 0xcc};  // what follows differs
  auto again = decoder.decode(other_tail, regs);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(decoder.cache_hits(), 1u);
  ASSERT_EQ(again->load_count, 1);
  EXPECT_EQ(again->loads[0].address, 0x3000u);  // from the registers of this step

  const std::vector<uint8_t> store = {0x48, 0x89, 0x03};  // mov [rbx], rax at the same RIP
  auto modified = decoder.decode(store, regs);
  ASSERT_TRUE(modified.has_value());
  EXPECT_EQ(decoder.cache_hits(), 1u);
  EXPECT_EQ(modified->load_count, 0);
  EXPECT_EQ(modified->store_count, 1);

  const std::vector<uint8_t> invalid = {0x0f, 0xff};  // UD0 without its ModRM: undecodable
  EXPECT_FALSE(decoder.decode(invalid, regs).has_value());
  auto store_again = decoder.decode(store, regs);  // the failed decode left no stale entry
  ASSERT_TRUE(store_again.has_value());
  EXPECT_EQ(store_again->store_count, 1);
}

}  // namespace
// Instructions the KVM stepper may single-step with TF (DESIGN §4.7): they compute in general
// registers only, so they cannot fault, touch memory or read RFLAGS.TF, and nothing of the guest
// can see the TF. Everything else keeps its successor breakpoint.
TEST_F(DecoderTest, OnlyRegisterComputationsAreTrapFlagSafe) {
  const std::vector<std::pair<std::vector<uint8_t>, const char*>> safe = {
      {{0x48, 0x01, 0xd8}, "add rax, rbx"},
      {{0x31, 0xc9}, "xor ecx, ecx"},
      {{0x48, 0x69, 0xc0, 0x2d, 0x7f, 0x95, 0x4c}, "imul rax, rax, imm32"},
      {{0x48, 0xc1, 0xe0, 0x0d}, "shl rax, 13"},
      {{0x48, 0xff, 0xc9}, "dec rcx"},
      {{0x48, 0x8d, 0x04, 0x18}, "lea rax, [rax+rbx]"},
      {{0x48, 0x89, 0xc3}, "mov rbx, rax"},
      {{0xb8, 0x01, 0x00, 0x00, 0x00}, "mov eax, 1"},
      {{0x48, 0x0f, 0x44, 0xc3}, "cmove rax, rbx"},
      {{0x0f, 0x94, 0xc0}, "sete al"},
      {{0x48, 0x85, 0xc0}, "test rax, rax"},
      {{0x90}, "nop"},
      {{0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00}, "nopw [rax+rax]: a hint, no access"},
      {{0x75, 0xfe}, "jnz rel8"},
      {{0xeb, 0x00}, "jmp rel8"},
      {{0x48, 0x99}, "cqo"},
  };
  for (const auto& [bytes, what] : safe) EXPECT_TRUE(decode(bytes).trap_flag_safe) << what;
  const std::vector<std::pair<std::vector<uint8_t>, const char*>> unsafe = {
      {{0x48, 0x8b, 0x03}, "mov rax, [rbx]: may fault"},
      {{0x50}, "push rax: the stack"},
      {{0xc3}, "ret: the stack"},
      {{0xe8, 0x00, 0x00, 0x00, 0x00}, "call: the stack"},
      {{0x9c}, "pushfq: reads TF"},
      {{0x9d}, "popfq: writes TF"},
      {{0x0f, 0x05}, "syscall: R11 = RFLAGS"},
      {{0xcc}, "int3"},
      {{0xcd, 0x80}, "int 0x80"},
      {{0x48, 0xf7, 0xf3}, "div rbx: #DE"},
      {{0x48, 0xf7, 0xfb}, "idiv rbx: #DE"},
      {{0x8e, 0xd0}, "mov ss, eax: #GP, and it holds the trap back"},
      {{0x8c, 0xd8}, "mov eax, ds: a segment register"},
      {{0xff, 0xe0}, "jmp rax: #GP on a non-canonical target"},
      {{0x0f, 0xa2}, "cpuid: KVM completes it"},
      {{0x0f, 0x31}, "rdtsc: #GP with CR4.TSD"},
      {{0xf3, 0x90}, "pause: KVM may exit on it"},
      {{0xf3, 0xaa}, "rep stosb"},
      {{0xf3, 0x48, 0x0f, 0xb8, 0xc3}, "popcnt: #UD where the CPU lacks it"},
      {{0x0f, 0x28, 0xc1}, "movaps xmm0, xmm1: SSE state"},
      {{0xfa}, "cli: #GP at CPL 3"},
      {{0x0f, 0x0b}, "ud2"},
  };
  for (const auto& [bytes, what] : unsafe) EXPECT_FALSE(decode(bytes).trap_flag_safe) << what;
}

// Block stepping (DESIGN §4.7) runs memory computations inside a block where it can prove their
// accesses from registers no earlier instruction of the block wrote.
TEST_F(DecoderTest, MemoryComputationsNameTheRegistersTheyWriteAndAddressWith) {
  constexpr uint16_t kRax = 1 << 0, kRcx = 1 << 1, kRdx = 1 << 2, kRbx = 1 << 3, kRsp = 1 << 4,
                     kRdi = 1 << 7;
  auto d = decode({0x48, 0x8b, 0x04, 0xcb});  // mov rax, [rbx+rcx*8]
  EXPECT_TRUE(d.memory_computation);
  EXPECT_FALSE(d.trap_flag_safe);
  EXPECT_EQ(d.gprs_written, kRax);
  EXPECT_EQ(d.gprs_addressing, kRbx | kRcx);
  d = decode({0x01, 0x07});  // add [rdi], eax
  EXPECT_TRUE(d.memory_computation);
  EXPECT_EQ(d.gprs_written, 0);
  EXPECT_EQ(d.gprs_addressing, kRdi);
  d = decode({0x48, 0xf7, 0x26});  // mul qword [rsi]: RDX:RAX
  EXPECT_TRUE(d.memory_computation);
  EXPECT_EQ(d.gprs_written, kRax | kRdx);
  d = decode({0x8b, 0x44, 0x24, 0x08});  // mov eax, [rsp+8]
  EXPECT_EQ(d.gprs_addressing, kRsp);
  d = decode({0x48, 0x83, 0xec, 0x08});  // sub rsp, 8: registers only, RSP moved by -8
  EXPECT_TRUE(d.trap_flag_safe);
  EXPECT_FALSE(d.memory_computation);
  EXPECT_EQ(d.gprs_written, 0);
  EXPECT_EQ(d.adjusted_gpr, 4);
  EXPECT_EQ(d.adjustment, -8);
  EXPECT_FALSE(decode({0x48, 0x0f, 0xa3, 0x08}).memory_computation);  // bt [rax], rcx: reaches past
  EXPECT_FALSE(decode({0xf0, 0x48, 0x01, 0x18}).memory_computation);  // lock add [rax], rbx
  EXPECT_FALSE(decode({0x50}).memory_computation);                    // push rax
  EXPECT_FALSE(decode({0x48, 0xf7, 0x36}).memory_computation);        // div qword [rsi]: #DE
  EXPECT_FALSE(decode({0xff, 0x23}).memory_computation);              // jmp [rbx]
  EXPECT_FALSE(decode({0x0f, 0x28, 0x06}).memory_computation);        // movaps xmm0, [rsi]
}

TEST_F(DecoderTest, ConstantMovesOfRegistersAreFollowedNotForgotten) {
  struct Case {
    std::vector<uint8_t> bytes;
    int8_t gpr;
    int64_t by;
    uint16_t written;
  };
  const Case cases[] = {
      {{0x55}, 4, -8, 0},                         // push rbp
      {{0x5b}, 4, 8, 1 << 3},                     // pop rbx: RBX unknown
      {{0x5c}, -1, 0, 1 << 4},                    // pop rsp: RSP unknown
      {{0xe8, 0, 0, 0, 0}, 4, -8, 0},             // call
      {{0xc3}, 4, 8, 0},                          // ret
      {{0xc2, 0x10, 0x00}, 4, 24, 0},             // ret 16
      {{0x48, 0x83, 0xc6, 0x18}, 6, 24, 0},       // add rsi, 24
      {{0x48, 0xff, 0xcf}, 7, -1, 0},             // dec rdi
      {{0x48, 0x8d, 0x5b, 0xf0}, 3, -16, 0},      // lea rbx, [rbx-16]
      {{0x83, 0xc6, 0x18}, -1, 0, 1 << 6},        // add esi, 24: zero-extends, unknown
      {{0x48, 0x8d, 0x1c, 0x0b}, -1, 0, 1 << 3},  // lea rbx, [rbx+rcx]: unknown
  };
  for (const Case& c : cases) {
    const DecodedInstruction d = decode(c.bytes);
    EXPECT_EQ(d.adjusted_gpr, c.gpr) << std::hex << int(c.bytes[0]);
    EXPECT_EQ(d.adjustment, c.by) << std::hex << int(c.bytes[0]);
    EXPECT_EQ(d.gprs_written, c.written) << std::hex << int(c.bytes[0]);
  }
  const DecodedInstruction push = decode({0x50});  // push rax: one store below RSP
  EXPECT_TRUE(push.stack_push_pop);
  ASSERT_EQ(push.store_count, 1);
  EXPECT_EQ(push.stores[0].address, 0x7FF0u - 8);
  EXPECT_TRUE(decode({0x6a, 0x01}).stack_push_pop);   // push 1
  EXPECT_FALSE(decode({0x0f, 0xa0}).stack_push_pop);  // push fs
  EXPECT_FALSE(decode({0xff, 0x33}).stack_push_pop);  // push [rbx]: two accesses
}

}  // namespace vmm
