// The emulator core of `--stepper emulate` (vmm/emulate/user_code_emulator.h) on Unicorn, over
// guest RAM with page tables built here: exact instruction counts (whole blocks, a limit inside
// a block, loops), stops before what KVM must run, the TLB it fills from the guest's tables
// (Accessed/Dirty flags, user/writable/XD permissions: refused accesses end the run before
// their instruction), and code the guest rewrites.
#include "vmm/emulate/user_code_emulator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace vmm {
namespace {

constexpr uint64_t P = 1, W = 2, U = 4, A = 0x20, D = 0x40, XD = 1ull << 63;
constexpr uint64_t kPml4 = 0x1000, kPdpt = 0x2000, kPd = 0x3000, kPt = 0x4000;
// Linear pages (PT entries 0x400000 + 4 KiB x i) -> frames 0x200000 + 4 KiB x i.
constexpr uint64_t kCode = 0x400000, kData = 0x401000, kKernel = 0x402000, kReadOnly = 0x403000,
                   kNoExecute = 0x404000, kAbsent = 0x405000;

class UserCodeEmulatorTest : public ::testing::Test {
 protected:
  UserCodeEmulatorTest() : ram_(16 << 20, GuestRam::Backing::kShareable), emulator_(ram_) {
    set(kPml4, 0, kPdpt | P | W | U);
    set(kPdpt, 0, kPd | P | W | U);
    set(kPd, 2, kPt | P | W | U);
    set(kPt, 0, frame(kCode) | P | U);                // code: read-only, executable
    set(kPt, 1, frame(kData) | P | W | U | XD);       // data
    set(kPt, 2, frame(kKernel) | P | W | XD);         // supervisor
    set(kPt, 3, frame(kReadOnly) | P | U | XD);       // read-only data
    set(kPt, 4, frame(kNoExecute) | P | W | U | XD);  // data, and code placed there
    regs_.rsp = kData + 0x800;
    regs_.rflags = 0x202;
  }
  static uint64_t frame(uint64_t linear) { return 0x200000 + (linear - kCode); }
  void set(uint64_t table, unsigned index, uint64_t entry) {
    ASSERT_TRUE(ram_.write_u64(table + index * 8, entry));
  }
  uint64_t pte(uint64_t linear) {
    uint64_t v = 0;
    EXPECT_TRUE(ram_.read_u64(kPt + ((linear - kCode) >> 12) * 8, v));
    return v;
  }
  void code(std::vector<uint8_t> bytes, uint64_t at = kCode) {
    ASSERT_TRUE(ram_.write(frame(at), std::as_bytes(std::span(bytes))));
    regs_.rip = at;
  }
  EmulationRun run(uint64_t limit) { return emulator_.run(regs_, kPml4, /*nxe=*/true, limit); }

  GuestRam ram_;
  UserCodeEmulator emulator_;
  GuestRegisters regs_;
};

// inc rax (48 ff c0) x4, then dec rcx; jnz back: a loop of 6 instructions per pass.
std::vector<uint8_t> CountingLoop() {
  return {0x48, 0xff, 0xc0, 0x48, 0xff, 0xc0, 0x48, 0xff,
          0xc0, 0x48, 0xff, 0xc0, 0x48, 0xff, 0xc9,  // dec rcx
          0x75, 0xef,                                // jnz -17 (to the start)
          0x0f, 0x05};                               // syscall
}

// Blocks run whole or not at all: the loop's block is its 6 instructions, so a limit inside it
// stops the run before it, with every whole pass that fits retired and the state after it.
TEST_F(UserCodeEmulatorTest, NeverPassesTheLimitAndStopsBeforeABlockThatWould) {
  code(CountingLoop());
  for (uint64_t limit : {1u, 5u, 6u, 7u, 13u, 5999u}) {
    regs_.rip = kCode, regs_.rax = 0, regs_.rcx = 1000;
    const EmulationRun r = run(limit);
    EXPECT_EQ(r.end, EmulationRun::End::kLimit) << limit;
    EXPECT_EQ(r.retired, limit / 6 * 6) << limit;
    EXPECT_EQ(regs_.rax, limit / 6 * 4) << limit;
    EXPECT_EQ(regs_.rcx, 1000 - limit / 6) << limit;
    EXPECT_EQ(regs_.rip, kCode) << limit;
  }
}

TEST_F(UserCodeEmulatorTest, ALoopRunsToTheSyscallWhichIsKvms) {
  code(CountingLoop());
  regs_.rcx = 1000;
  const EmulationRun r = run(UINT64_MAX);
  EXPECT_EQ(r.end, EmulationRun::End::kKvmOnly);
  EXPECT_EQ(r.kvm_only, KvmOnly::kKernelEntry);
  EXPECT_EQ(r.retired, 6000u);
  EXPECT_EQ(r.branches, 1000u) << "the jnz of each pass";
  EXPECT_EQ(r.conditional_branches, 1000u);
  EXPECT_EQ(regs_.rax, 4000u);
  EXPECT_EQ(regs_.rcx, 0u);
  EXPECT_EQ(regs_.rip, kCode + 17) << "stopped before the syscall";
  // Again from there: it stops at once, nothing retired.
  const EmulationRun again = run(UINT64_MAX);
  EXPECT_EQ(again.end, EmulationRun::End::kKvmOnly);
  EXPECT_EQ(again.retired, 0u);
  EXPECT_EQ(regs_.rip, kCode + 17);
}

TEST_F(UserCodeEmulatorTest, InstructionsThatReadTheHostGoToKvm) {
  for (std::vector<uint8_t> insn : {std::vector<uint8_t>{0x0f, 0xa2},  // cpuid
                                    {0x0f, 0x31},                      // rdtsc
                                    {0x48, 0x0f, 0xc7, 0xf0},          // rdrand rax
                                    {0xf4},                            // hlt
                                    {0x0f, 0x0b}}) {                   // ud2
    // inc rax; jmp over an int3 (the block ends at a jump), then the instruction
    std::vector<uint8_t> bytes = {0x48, 0xff, 0xc0, 0xeb, 0x01, 0xcc};
    bytes.insert(bytes.end(), insn.begin(), insn.end());
    emulator_.flush();
    code(bytes);
    const EmulationRun r = run(UINT64_MAX);
    EXPECT_EQ(r.end, EmulationRun::End::kKvmOnly) << int(insn[1]);
    EXPECT_EQ(r.retired, 2u) << int(insn[1]);
    EXPECT_EQ(regs_.rip, kCode + 6) << int(insn[1]);
  }
}

TEST_F(UserCodeEmulatorTest, ReadsSetAccessedWritesSetDirtyAsHardware) {
  // mov rax, [kData]; mov [kData + 8], rax; jmp over an int3; syscall
  code({0x48, 0x8b, 0x04, 0x25, 0x00, 0x10, 0x40, 0x00, 0x48, 0x89, 0x04,
        0x25, 0x08, 0x10, 0x40, 0x00, 0xeb, 0x01, 0xcc, 0x0f, 0x05});
  ASSERT_TRUE(ram_.write_u64(frame(kData), 0x1234));
  EXPECT_EQ(pte(kData) & (A | D), 0u);
  ram_.set_write_tracking(true);
  const EmulationRun r = run(UINT64_MAX);
  EXPECT_EQ(r.retired, 3u);
  EXPECT_EQ(r.branches, 1u) << "the jmp";
  EXPECT_EQ(r.conditional_branches, 0u);
  // A live migration sends what the emulator wrote: the page, and the tables whose Accessed
  // and Dirty flags the walk set.
  EXPECT_EQ(ram_.take_written_pages(), (std::vector<uint64_t>{kPml4 >> 12, kPdpt >> 12, kPd >> 12,
                                                              kPt >> 12, frame(kData) >> 12}));
  uint64_t stored = 0;
  ASSERT_TRUE(ram_.read_u64(frame(kData) + 8, stored));
  EXPECT_EQ(stored, 0x1234u) << "into guest RAM itself";
  EXPECT_EQ(pte(kData) & (A | D), A | D);
  EXPECT_EQ(pte(kCode) & (A | D), A) << "fetched, not written";
  EXPECT_EQ(pte(kReadOnly) & A, 0u) << "not touched";
}

TEST_F(UserCodeEmulatorTest, RefusedAccessesEndTheRunBeforeTheirInstruction) {
  struct Case {
    uint64_t address;
    bool store;
  };
  for (const Case c :
       {Case{kKernel, false}, Case{kReadOnly, true}, Case{kAbsent, false}, Case{kAbsent, true}}) {
    emulator_.flush();
    // inc rax; inc rax; mov rax, [addr] / mov [addr], rax; inc rax
    std::vector<uint8_t> bytes = {0x48, 0xff, 0xc0, 0x48,
                                  0xff, 0xc0, 0x48, static_cast<uint8_t>(c.store ? 0x89 : 0x8b),
                                  0x04, 0x25};
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<uint8_t>(c.address >> (8 * i)));
    bytes.insert(bytes.end(), {0x48, 0xff, 0xc0});
    code(bytes);
    regs_.rax = 0;
    const EmulationRun r = run(UINT64_MAX);
    SCOPED_TRACE(testing::Message() << std::hex << c.address << " store " << c.store);
    EXPECT_EQ(r.end, EmulationRun::End::kFault);
    EXPECT_EQ(r.retired, 2u);
    EXPECT_EQ(regs_.rax, 2u);
    EXPECT_EQ(regs_.rip, kCode + 6);
  }
  EXPECT_EQ(pte(kReadOnly) & D, 0u);
}

TEST_F(UserCodeEmulatorTest, CodeOnAnExecuteDisabledPageIsNotRun) {
  code({0x48, 0xff, 0xc0}, kNoExecute);
  const EmulationRun r = run(UINT64_MAX);
  EXPECT_EQ(r.end, EmulationRun::End::kFault);
  EXPECT_EQ(r.retired, 0u);
  EXPECT_EQ(regs_.rip, kNoExecute);
}

TEST_F(UserCodeEmulatorTest, CodeTheGuestRewritesRunsAsRewritten) {
  // Code on a writable, executable page: it runs once, then the test (as KVM, the kernel or
  // another vCPU would) rewrites it in guest RAM; the next run runs the new code, not the old
  // block.
  set(kPt, 5, frame(kAbsent) | P | W | U);
  code({0x48, 0xff, 0xc0, 0xeb, 0x01, 0xcc, 0x0f, 0x05}, kAbsent);  // inc rax; jmp; syscall
  regs_.rax = 0;
  run(UINT64_MAX);
  EXPECT_EQ(regs_.rax, 1u);
  code({0x48, 0xff, 0xc8, 0xeb, 0x01, 0xcc, 0x0f, 0x05}, kAbsent);  // dec rax; jmp; syscall
  run(UINT64_MAX);
  EXPECT_EQ(regs_.rax, 0u);
}

// Self-modifying code: a write to a page the emulator runs code from is KVM's (W^X in the
// emulator's TLB), so the run ends before the store, which has not happened: no stale block
// can run.
TEST_F(UserCodeEmulatorTest, CodeThatWritesItsOwnPageEndsTheRunBeforeTheStore) {
  set(kPt, 5, frame(kAbsent) | P | W | U);
  // inc rax; mov byte [kAbsent + 15], 0xc8; nop; nop; inc rax; jmp over an int3; syscall
  code({0x48, 0xff, 0xc0, 0xc6, 0x04, 0x25, 0x0f, 0x50, 0x40, 0x00, 0xc8,
        0x90, 0x90, 0x48, 0xff, 0xc0, 0xeb, 0x01, 0xcc, 0x0f, 0x05},
       kAbsent);
  regs_.rax = 5;
  const EmulationRun r = run(UINT64_MAX);
  EXPECT_EQ(r.end, EmulationRun::End::kFault);
  EXPECT_TRUE(r.position_known);
  EXPECT_EQ(r.retired, 1u);
  EXPECT_EQ(regs_.rax, 6u);
  EXPECT_EQ(regs_.rip, kAbsent + 3) << "before the store";
  uint8_t byte = 0;
  ASSERT_TRUE(ram_.read(frame(kAbsent) + 15, std::as_writable_bytes(std::span(&byte, 1))));
  EXPECT_EQ(byte, 0xc0) << "not written";
}

// Data written on a page, then code run from it: the fetch from a page the emulator wrote goes
// to KVM (W^X), precisely at the jump's target; at the next run the page is code.
TEST_F(UserCodeEmulatorTest, APageWrittenThenRunFromRuns) {
  set(kPt, 5, frame(kAbsent) | P | W | U);
  code({0x48, 0xff, 0xc0, 0xeb, 0x01, 0xcc, 0x0f, 0x05}, kAbsent + 0x10);  // inc rax; jmp; syscall
  // mov [kAbsent + 0x100], rax; mov ecx, kAbsent + 0x10; jmp rcx
  code({0x48, 0x89, 0x04, 0x25, 0x00, 0x51, 0x40, 0x00, 0xb9, 0x10, 0x50, 0x40, 0x00, 0xff, 0xe1});
  regs_.rax = 7;
  const EmulationRun w = run(UINT64_MAX);
  EXPECT_EQ(w.end, EmulationRun::End::kFault);
  EXPECT_TRUE(w.position_known);
  EXPECT_EQ(w.retired, 3u);  // mov, mov, jmp
  EXPECT_EQ(regs_.rip, kAbsent + 0x10);
  EXPECT_EQ(pte(kAbsent) & (A | D), A | D);
  const EmulationRun x = run(UINT64_MAX);
  EXPECT_EQ(x.end, EmulationRun::End::kKvmOnly);
  EXPECT_EQ(x.retired, 2u);  // inc, jmp
  EXPECT_EQ(regs_.rax, 8u);
  EXPECT_EQ(regs_.rip, kAbsent + 0x16);
  uint64_t stored = 0;
  ASSERT_TRUE(ram_.read_u64(frame(kAbsent) + 0x100, stored));
  EXPECT_EQ(stored, 7u);
}

// Unicorn 2.0.1 aborts the process when it translates FF /3 or /5 with a register operand
// (`ff ee`, found by user_code_emulator_fuzz): the run ends before such an instruction, also
// behind prefixes, and KVM raises its #UD. The same bytes inside another instruction (an
// immediate -1 before a CALL's opcode) are no instruction and run.
TEST_F(UserCodeEmulatorTest, CodeThatWouldCrashTheTranslatorIsLeftToKvm) {
  for (const std::vector<uint8_t>& invalid :
       {std::vector<uint8_t>{0xff, 0xee}, {0x48, 0xff, 0xe8}, {0x66, 0x2e, 0xff, 0xdb}}) {
    // inc rax; mov ecx, -1 (b9 ff ff ff ff); jmp; int3; then the instruction
    std::vector<uint8_t> bytes = {0x48, 0xff, 0xc0, 0xb9, 0xff, 0xff, 0xff, 0xff, 0xeb, 0x01, 0xcc};
    bytes.insert(bytes.end(), invalid.begin(), invalid.end());
    emulator_.flush();
    code(bytes);
    regs_.rax = 0;
    const EmulationRun r = run(UINT64_MAX);
    EXPECT_EQ(r.end, EmulationRun::End::kKvmOnly) << int(invalid.size());
    EXPECT_EQ(r.retired, 3u);
    EXPECT_EQ(regs_.rax, 1u);
    EXPECT_EQ(regs_.rip, kCode + 11);
  }
  // Starting at it, and jumping to it on a page not yet mapped: the translator looks for an
  // exit at a block's start before the page's first fetch.
  for (const uint64_t at : {kCode, kAbsent}) {
    set(kPt, 5, frame(kAbsent) | P | U);
    emulator_.flush();
    code({0xff, 0xe8}, kAbsent);
    code({0xb9, 0x00, 0x50, 0x40, 0x00, 0xff, 0xe1});  // mov ecx, kAbsent; jmp rcx
    regs_.rip = at;
    const EmulationRun r = run(UINT64_MAX);
    EXPECT_EQ(r.end, EmulationRun::End::kKvmOnly);
    EXPECT_EQ(r.retired, at == kCode ? 2u : 0u);
    EXPECT_EQ(regs_.rip, kAbsent);
  }
  // `mov ecx, -1` followed by a CALL's opcode: the FF E8 pair is inside two instructions.
  // mov ecx, -1; call +0 (e8 00 00 00 00); pop rax; jmp; int3; syscall
  emulator_.flush();
  code({0xb9, 0xff, 0xff, 0xff, 0xff, 0xe8, 0x00, 0x00, 0x00, 0x00, 0x58, 0xeb, 0x01, 0xcc, 0x0f,
        0x05});
  regs_.rax = 0;
  const EmulationRun r = run(UINT64_MAX);
  EXPECT_EQ(r.end, EmulationRun::End::kKvmOnly);
  EXPECT_EQ(r.kvm_only, KvmOnly::kKernelEntry);
  EXPECT_EQ(r.retired, 4u);
  EXPECT_EQ(regs_.rax, kCode + 10) << "the CALL's return address, popped";
}

// A branch to a non-canonical address raises #GP at the branch on hardware (it does not retire,
// RSP unchanged); Unicorn jumps there. The emulator undoes such a RET, JMP or CALL (a hostile
// guest's `call rax` must not end the VM); the CALL's return address stays below RSP.
TEST_F(UserCodeEmulatorTest, ABranchToANonCanonicalAddressDoesNotRetire) {
  // inc rax; ret (to the non-canonical address on the stack)
  code({0x48, 0xff, 0xc0, 0xc3});
  ASSERT_TRUE(ram_.write_u64(frame(kData) + 0x800, 0x0000800000000000));
  regs_.rsp = kData + 0x800;
  EmulationRun r = run(UINT64_MAX);
  EXPECT_EQ(r.end, EmulationRun::End::kFault);
  EXPECT_TRUE(r.position_known);
  EXPECT_EQ(r.retired, 1u);
  EXPECT_EQ(r.branches, 0u);
  EXPECT_EQ(regs_.rip, kCode + 3) << "at the ret";
  EXPECT_EQ(regs_.rsp, kData + 0x800) << "nothing popped";
  // jmp rax
  emulator_.flush();
  code({0xff, 0xe0});
  regs_.rax = 0xFFFF000000000000;
  r = run(UINT64_MAX);
  EXPECT_TRUE(r.position_known);
  EXPECT_EQ(r.retired, 0u);
  EXPECT_EQ(regs_.rip, kCode);
  // inc rax; call rbx
  emulator_.flush();
  code({0x48, 0xff, 0xc0, 0xff, 0xd3});
  regs_.rbx = 0x0000800000000000;
  regs_.rsp = kData + 0x800;
  r = run(UINT64_MAX);
  EXPECT_EQ(r.end, EmulationRun::End::kFault);
  EXPECT_TRUE(r.position_known);
  EXPECT_EQ(r.retired, 1u);
  EXPECT_EQ(r.branches, 0u);
  EXPECT_EQ(regs_.rip, kCode + 3) << "at the call";
  EXPECT_EQ(regs_.rsp, kData + 0x800) << "RSP as before the call";
}

// A page read before code is fetched from it (constants, a jump table beside the code) is
// mapped executable at that read when the tables let user mode execute it: the jump to it runs
// on in the emulator.
TEST_F(UserCodeEmulatorTest, APageReadThenRunFromRunsOn) {
  constexpr uint64_t kOther = kCode + 0x6000;
  set(kPt, 6, frame(kOther) | P | U);
  code({0x48, 0xff, 0xc0, 0xeb, 0x01, 0xcc, 0x0f, 0x05}, kOther);  // inc rax; jmp; syscall
  ASSERT_TRUE(ram_.write_u64(frame(kOther) + 0x100, 41));
  // mov rax, [kOther + 0x100]; mov ecx, kOther; jmp rcx
  code({0x48, 0x8b, 0x04, 0x25, 0x00, 0x61, 0x40, 0x00, 0xb9, 0x00, 0x60, 0x40, 0x00, 0xff, 0xe1});
  const EmulationRun r = run(UINT64_MAX);
  EXPECT_EQ(r.end, EmulationRun::End::kKvmOnly);
  EXPECT_EQ(r.retired, 5u);
  EXPECT_EQ(regs_.rax, 42u);
  EXPECT_EQ(regs_.rip, kOther + 6);
}

}  // namespace
}  // namespace vmm

namespace vmm {
namespace {

// Between two runs the kernel ran: it moved the data page to another frame, and cleared the
// Dirty flag of the page the last run wrote (writeback) and the Accessed flag of the code page
// (reclaim's aging). Each run checks its TLB against the tables, as a TLB flush would: the store
// goes to the new frame and sets Dirty again, the fetch sets Accessed again.
TEST_F(UserCodeEmulatorTest, TablesTheKernelChangedBetweenRunsAreWalkedAgain) {
  // mov [kData], rax; jmp over an int3; syscall
  code({0x48, 0x89, 0x04, 0x25, 0x00, 0x10, 0x40, 0x00, 0xeb, 0x01, 0xcc, 0x0f, 0x05});
  regs_.rax = 1;
  ASSERT_EQ(run(UINT64_MAX).retired, 2u);
  EXPECT_EQ(pte(kData) & (A | D), A | D);
  set(kPt, 1, (pte(kData) & ~D));  // writeback: clean again
  set(kPt, 0, pte(kCode) & ~A);    // aged
  regs_.rip = kCode, regs_.rax = 2;
  ASSERT_EQ(run(UINT64_MAX).retired, 2u);
  EXPECT_EQ(pte(kData) & D, D) << "the store set Dirty again";
  EXPECT_EQ(pte(kCode) & A, A) << "the fetch set Accessed again";
  // The data page moves to the frame of kAbsent's (not mapped anywhere else).
  set(kPt, 1, frame(kAbsent) | P | W | U | XD);
  regs_.rip = kCode, regs_.rax = 3;
  ASSERT_EQ(run(UINT64_MAX).retired, 2u);
  uint64_t old_frame = 0, new_frame = 0;
  ASSERT_TRUE(ram_.read_u64(frame(kData), old_frame));
  ASSERT_TRUE(ram_.read_u64(frame(kAbsent), new_frame));
  EXPECT_EQ(old_frame, 2u);
  EXPECT_EQ(new_frame, 3u);
  // And a page the kernel unmapped is refused, before its instruction.
  set(kPt, 1, 0);
  regs_.rip = kCode;
  const EmulationRun r = run(UINT64_MAX);
  EXPECT_EQ(r.end, EmulationRun::End::kFault);
  EXPECT_EQ(r.retired, 0u);
  EXPECT_EQ(regs_.rip, kCode);
}

// Two processes run different code at the same linear address (their own CR3s): each runs its
// own, and going back to the first keeps its translated blocks (the bytes are the same).
TEST_F(UserCodeEmulatorTest, AnotherAddressSpaceRunsItsOwnCodeAtTheSameAddress) {
  code({0x48, 0xff, 0xc0, 0xeb, 0x01, 0xcc, 0x0f, 0x05});  // inc rax; jmp; syscall
  // A second address space: the same tables but for the code page, which maps kAbsent's frame.
  constexpr uint64_t kPml4b = 0x5000, kPdptb = 0x6000, kPdb = 0x7000, kPtb = 0x8000;
  set(kPml4b, 0, kPdptb | P | W | U);
  set(kPdptb, 0, kPdb | P | W | U);
  set(kPdb, 2, kPtb | P | W | U);
  for (unsigned i = 1; i < 8; ++i) set(kPtb, i, pte(kCode + i * 0x1000));
  set(kPtb, 0, frame(kAbsent) | P | U);
  const std::vector<uint8_t> other = {0x48, 0xff, 0xc8, 0xeb, 0x01, 0xcc, 0x0f, 0x05};  // dec rax
  ASSERT_TRUE(ram_.write(frame(kAbsent), std::as_bytes(std::span(other))));
  for (int round = 0; round < 2; ++round) {
    regs_.rip = kCode, regs_.rax = 10;
    ASSERT_EQ(emulator_.run(regs_, kPml4, true, UINT64_MAX).retired, 2u);
    EXPECT_EQ(regs_.rax, 11u) << round;
    regs_.rip = kCode, regs_.rax = 10;
    ASSERT_EQ(emulator_.run(regs_, kPml4b, true, UINT64_MAX).retired, 2u);
    EXPECT_EQ(regs_.rax, 9u) << round;
  }
}

// A batch may be limited in branches and conditional branches too (a model's next event may be
// the n-th branch): the run stops before the block whose branch would pass the limit.
TEST_F(UserCodeEmulatorTest, BranchLimitsStopBeforeTheBlockWhoseBranchWouldPassThem) {
  code(CountingLoop());
  for (uint64_t most : {0u, 1u, 7u}) {
    regs_.rip = kCode, regs_.rax = 0, regs_.rcx = 1000;
    const EmulationRun b =
        emulator_.run(regs_, kPml4, true, UserCodeEmulator::Limit{.branches = most});
    EXPECT_EQ(b.end, EmulationRun::End::kLimit);
    EXPECT_EQ(b.branches, most);
    EXPECT_EQ(b.retired, 6 * most);
    regs_.rip = kCode, regs_.rax = 0, regs_.rcx = 1000;
    const EmulationRun c =
        emulator_.run(regs_, kPml4, true, UserCodeEmulator::Limit{.conditional_branches = most});
    EXPECT_EQ(c.conditional_branches, most);
    EXPECT_EQ(c.retired, 6 * most);
  }
}

// A copy-on-write page: read, incremented, written back in one block. The store is refused;
// the load of the same address ran. Only a store can have made a refused write, so the run
// ends exactly before the store, the load and the increment retired. Two stores to one refused
// address: the first faulted (the second cannot have run without the first running first).
TEST_F(UserCodeEmulatorTest, ARefusedStoreAfterALoadOfTheSameAddressIsTold) {
  // mov rax, [kReadOnly]; inc rax; mov [kReadOnly], rax; mov [kReadOnly], rcx; jmp; syscall
  code({0x48, 0x8b, 0x04, 0x25, 0x00, 0x30, 0x40, 0x00, 0x48, 0xff, 0xc0,
        0x48, 0x89, 0x04, 0x25, 0x00, 0x30, 0x40, 0x00, 0x48, 0x89, 0x0c,
        0x25, 0x00, 0x30, 0x40, 0x00, 0xeb, 0x01, 0xcc, 0x0f, 0x05});
  ASSERT_TRUE(ram_.write_u64(frame(kReadOnly), 41));
  const EmulationRun r = run(UINT64_MAX);
  EXPECT_EQ(r.end, EmulationRun::End::kFault);
  ASSERT_TRUE(r.position_known);
  EXPECT_EQ(r.retired, 2u);
  EXPECT_EQ(regs_.rax, 42u);
  EXPECT_EQ(regs_.rip, kCode + 11) << "before the first store";
}

// A guest without NX (the bundled kernel's tables): every data page is executable. A data page
// read first is still mapped as data, so the stores after the read run in the emulator; a
// fetch from it ends the run, and the next run maps it as code.
TEST_F(UserCodeEmulatorTest, WritableExecutablePagesReadFirstAreData) {
  set(kPt, 5, frame(kAbsent) | P | W | U);  // writable and executable
  // mov rax, [kAbsent + 0x100]; inc rax; mov [kAbsent + 0x100], rax; jmp; syscall
  code({0x48, 0x8b, 0x04, 0x25, 0x00, 0x51, 0x40, 0x00, 0x48, 0xff, 0xc0, 0x48,
        0x89, 0x04, 0x25, 0x00, 0x51, 0x40, 0x00, 0xeb, 0x01, 0xcc, 0x0f, 0x05});
  ASSERT_TRUE(ram_.write_u64(frame(kAbsent) + 0x100, 41));
  const EmulationRun r = run(UINT64_MAX);
  EXPECT_EQ(r.end, EmulationRun::End::kKvmOnly);
  EXPECT_EQ(r.retired, 4u);
  uint64_t stored = 0;
  ASSERT_TRUE(ram_.read_u64(frame(kAbsent) + 0x100, stored));
  EXPECT_EQ(stored, 42u);
  // Code on that page: inc rax; jmp; syscall. The jump there ends one run; the next runs it.
  code({0x48, 0xff, 0xc0, 0xeb, 0x01, 0xcc, 0x0f, 0x05}, kAbsent + 0x200);
  code({0xb9, 0x00, 0x52, 0x40, 0x00, 0xff, 0xe1});  // mov ecx, kAbsent + 0x200; jmp rcx
  regs_.rax = 0;
  const EmulationRun to = run(UINT64_MAX);
  EXPECT_EQ(to.end, EmulationRun::End::kFault);
  EXPECT_EQ(to.retired, 2u);
  EXPECT_EQ(regs_.rip, kAbsent + 0x200);
  const EmulationRun on = run(UINT64_MAX);
  EXPECT_EQ(on.end, EmulationRun::End::kKvmOnly);
  EXPECT_EQ(on.retired, 2u);
  EXPECT_EQ(regs_.rax, 1u);
}

// A refused access inside a block: the state handed back is the state before the faulting
// instruction, RFLAGS included (TCG computes flags lazily; a fault that leaves its block
// without restoring the translator's state would hand back whatever its lazy state makes of
// them). add rax, 1 with RAX = -1 sets CF, PF, AF and ZF.
TEST_F(UserCodeEmulatorTest, ARefusedAccessHandsBackTheFlagsOfTheInstructionsBeforeIt) {
  // add rax, 1; mov [kReadOnly], rax; jmp; int3; syscall
  code({0x48, 0x83, 0xc0, 0x01, 0x48, 0x89, 0x04, 0x25, 0x00, 0x30, 0x40, 0x00, 0xeb, 0x01, 0xcc,
        0x0f, 0x05});
  regs_.rax = ~uint64_t{0};
  const EmulationRun r = run(UINT64_MAX);
  EXPECT_EQ(r.end, EmulationRun::End::kFault);
  ASSERT_TRUE(r.position_known);
  EXPECT_EQ(r.retired, 1u);
  EXPECT_EQ(regs_.rip, kCode + 4);
  EXPECT_EQ(regs_.rax, 0u);
  EXPECT_EQ(regs_.rflags, 0x202u | 0x55u) << std::hex << regs_.rflags;
}

// The vCPU's XMM registers as the emulator sees them (KVM's XSAVE area in pmuvm): what it read
// and what it wrote back.
struct FakeXmm : XmmRegisters {
  File read() override {
    ++reads;
    return file;
  }
  void write(const File& xmm) override {
    ++writes;
    file = xmm;
  }
  File file{};
  int reads = 0, writes = 0;
};

// SSE that computes in XMM registers and memory without floating-point exceptions runs in the
// emulator on the vCPU's XMM registers, read once, written back changed.
TEST_F(UserCodeEmulatorTest, SseIntegerCodeRunsOnTheVcpusXmmRegisters) {
  // movdqa xmm0, [rdi]; pcmpeqb xmm0, xmm1; pmovmskb eax, xmm0; movdqu [rdi + 0x20], xmm1;
  // jmp over an int3; syscall
  code({0x66, 0x0f, 0x6f, 0x07, 0x66, 0x0f, 0x74, 0xc1, 0x66, 0x0f, 0xd7,
        0xc0, 0xf3, 0x0f, 0x7f, 0x4f, 0x20, 0xeb, 0x01, 0xcc, 0x0f, 0x05});
  std::array<uint8_t, 16> data{};
  for (size_t i = 0; i < 16; ++i) data[i] = static_cast<uint8_t>(i);
  ASSERT_TRUE(ram_.write(frame(kData) + 0x100, std::as_bytes(std::span(data))));
  FakeXmm xmm;
  xmm.file[1] = data;
  xmm.file[1][3] = 0xEE, xmm.file[1][9] = 0xEE;  // bytes 3 and 9 differ
  regs_.rdi = kData + 0x100;
  const EmulationRun r = emulator_.run(regs_, kPml4, true, UINT64_MAX, 0, &xmm);
  EXPECT_EQ(r.end, EmulationRun::End::kKvmOnly);
  EXPECT_EQ(r.kvm_only, KvmOnly::kKernelEntry);
  EXPECT_EQ(r.retired, 5u);
  EXPECT_EQ(regs_.rax, 0xFFFFu & ~((1u << 3) | (1u << 9)));
  EXPECT_EQ(xmm.reads, 1);
  EXPECT_EQ(xmm.writes, 1);
  EXPECT_EQ(xmm.file[0][0], 0xFF);
  EXPECT_EQ(xmm.file[0][3], 0x00);
  std::array<uint8_t, 16> stored{};
  ASSERT_TRUE(ram_.read(frame(kData) + 0x120, std::as_writable_bytes(std::span(stored))));
  EXPECT_EQ(stored, xmm.file[1]);
  // Code that leaves them as they were writes nothing back.
  code({0x66, 0x0f, 0x6f, 0x07, 0x66, 0x0f, 0x7f, 0x07, 0xeb, 0x01, 0xcc, 0x0f, 0x05});
  xmm.file[0] = data;  // movdqa xmm0, [rdi] loads what xmm0 holds; movdqa [rdi], xmm0
  const EmulationRun same = emulator_.run(regs_, kPml4, true, UINT64_MAX, 0, &xmm);
  EXPECT_EQ(same.retired, 3u);
  EXPECT_EQ(xmm.reads, 2);
  EXPECT_EQ(xmm.writes, 1);
}

// What the emulator cannot run as a CPU does goes to KVM, the block holding it from its start:
// a 16-byte access a CPU refuses (misaligned where it must be aligned: #GP) or that crosses a
// page (Unicorn makes two accesses of it: the first is done when the second faults), one whose
// address is not known at the block's start, SSE floating point (MXCSR's flags), and SSE where
// the guest cannot run it now (no XMM registers given: CR0.TS, CR0.EM, no CR4.OSFXSR).
TEST_F(UserCodeEmulatorTest, SseTheEmulatorCannotRunAsACpuGoesToKvm) {
  struct Case {
    const char* what;
    std::vector<uint8_t> insn;
    uint64_t rdi;
    bool give_xmm;
  };
  const std::vector<Case> cases = {
      {"misaligned movdqa", {0x66, 0x0f, 0x6f, 0x07}, kData + 0x108, true},
      {"misaligned pcmpeqb", {0x66, 0x0f, 0x74, 0x07}, kData + 0x101, true},
      {"movdqu across a page", {0xf3, 0x0f, 0x6f, 0x07}, kData + 0xFF8, true},
      {"movdqu store across a page", {0xf3, 0x0f, 0x7f, 0x07}, kData + 0xFF1, true},
      {"address written before", {0x48, 0x89, 0xc7, 0x66, 0x0f, 0x6f, 0x07}, kData + 0x100, true},
      {"addps", {0x0f, 0x58, 0xc1}, kData, true},
      {"ldmxcsr", {0x0f, 0xae, 0x17}, kData, true},
      {"paddb on MMX registers", {0x0f, 0xfc, 0xc1}, kData, true},
      {"no XMM registers", {0x66, 0x0f, 0xef, 0xc0}, kData, false},
  };
  for (const Case& c : cases) {
    // inc rax; jmp over an int3 (its own block), then the case's block
    std::vector<uint8_t> bytes = {0x48, 0xff, 0xc0, 0xeb, 0x01, 0xcc};
    bytes.insert(bytes.end(), c.insn.begin(), c.insn.end());
    bytes.insert(bytes.end(), {0xeb, 0x01, 0xcc, 0x0f, 0x05});
    emulator_.flush();
    code(bytes);
    regs_.rdi = c.rdi;
    regs_.rax = kData + 0x100;
    FakeXmm xmm;
    const EmulationRun r =
        emulator_.run(regs_, kPml4, true, UINT64_MAX, 0, c.give_xmm ? &xmm : nullptr);
    EXPECT_EQ(r.end, EmulationRun::End::kKvmOnly) << c.what;
    EXPECT_EQ(r.kvm_only, KvmOnly::kNotComputing) << c.what;
    EXPECT_EQ(r.retired, 2u) << c.what;
    EXPECT_EQ(regs_.rip, kCode + 6) << c.what;
    EXPECT_EQ(xmm.writes, 0) << c.what;
  }
  // The same movdqu within its page runs.
  emulator_.flush();
  code({0xf3, 0x0f, 0x6f, 0x07, 0xeb, 0x01, 0xcc, 0x0f, 0x05});
  regs_.rdi = kData + 0xFF0;
  FakeXmm xmm;
  EXPECT_EQ(emulator_.run(regs_, kPml4, true, UINT64_MAX, 0, &xmm).retired, 2u);
}

// DIV and IDIV run in the emulator; a division by zero ends the run before the DIV (KVM raises
// the #DE), with the instructions before it retired.
TEST_F(UserCodeEmulatorTest, DivisionRunsAndADivideErrorIsKvms) {
  // mov ecx, 7; mov eax, 100; xor edx, edx; div ecx; xor ecx, ecx; div ecx; jmp; int3; syscall
  code({0xb9, 0x07, 0x00, 0x00, 0x00, 0xb8, 0x64, 0x00, 0x00, 0x00, 0x31, 0xd2,
        0xf7, 0xf1, 0x31, 0xc9, 0xf7, 0xf1, 0xeb, 0x01, 0xcc, 0x0f, 0x05});
  const EmulationRun r = run(UINT64_MAX);
  EXPECT_EQ(r.end, EmulationRun::End::kFault);
  EXPECT_EQ(r.retired, 5u);
  EXPECT_EQ(regs_.rip, kCode + 16);
  EXPECT_EQ(regs_.rax, 14u);
  EXPECT_EQ(regs_.rdx, 2u);
}

// LOCK-prefixed read-modify-writes and XCHG with memory run in the emulator when the guest has
// one vCPU; with several they are KVM's (Unicorn's atomics are not atomic against other vCPU
// threads).
TEST_F(UserCodeEmulatorTest, LockedInstructionsRunOnlyWithOneVcpu) {
  // mov eax, 5; lock xadd [rdi], eax; lock cmpxchg [rdi], ecx; xchg [rdi + 8], rdx; jmp; int3;
  // syscall
  const std::vector<uint8_t> bytes = {0xb8, 0x05, 0x00, 0x00, 0x00, 0xf0, 0x0f, 0xc1,
                                      0x07, 0xf0, 0x0f, 0xb1, 0x0f, 0x48, 0x87, 0x57,
                                      0x08, 0xeb, 0x01, 0xcc, 0x0f, 0x05};
  code(bytes);
  ASSERT_TRUE(ram_.write_u64(frame(kData), 10));
  ASSERT_TRUE(ram_.write_u64(frame(kData) + 8, 0x77));
  regs_.rdi = kData, regs_.rcx = 99, regs_.rdx = 0x55;
  const EmulationRun r = run(UINT64_MAX);
  EXPECT_EQ(r.end, EmulationRun::End::kKvmOnly);
  EXPECT_EQ(r.kvm_only, KvmOnly::kKernelEntry);
  EXPECT_EQ(r.retired, 5u);
  uint64_t v = 0;
  ASSERT_TRUE(ram_.read_u64(frame(kData), v));
  // xadd: [rdi] 15, EAX 10; cmpxchg: 10 is not 15, so EAX = 15 and [rdi] stays.
  EXPECT_EQ(v, 15u);
  EXPECT_EQ(regs_.rax, 15u);
  EXPECT_EQ(regs_.rdx, 0x77u);
  ASSERT_TRUE(ram_.read_u64(frame(kData) + 8, v));
  EXPECT_EQ(v, 0x55u);

  UserCodeEmulator several(ram_, /*multiple_vcpus=*/true);
  code(bytes);
  const EmulationRun locked = several.run(regs_, kPml4, true, UINT64_MAX);
  EXPECT_EQ(locked.end, EmulationRun::End::kKvmOnly);
  EXPECT_EQ(locked.kvm_only, KvmOnly::kLocked);
  EXPECT_EQ(locked.retired, 0u);
}

// W^X holds per frame, not per linear page: code written through another mapping of its frame
// (an alias) is never run stale. Unicorn keys translated blocks by address and sees no store
// through another window as a write to the code: a store to a frame mapped as code elsewhere is
// KVM's (the next run sees the new bytes), and a frame mapped writable elsewhere loses that
// mapping's write permission when it becomes code.
TEST_F(UserCodeEmulatorTest, CodeWrittenThroughAnAliasRunsAsWritten) {
  constexpr uint64_t kAlias = 0x406000, kOther = 0x407000;
  set(kPt, 6, frame(kCode) | P | W | U | A | D | XD);  // the code's frame, writable
  set(kPt, 7, frame(kOther) | P | U);                  // more code
  const auto disp = [](uint64_t a) {
    return std::vector<uint8_t>{static_cast<uint8_t>(a), static_cast<uint8_t>(a >> 8),
                                static_cast<uint8_t>(a >> 16), static_cast<uint8_t>(a >> 24)};
  };
  // At kOther: mov byte [kAlias + 0x800], 0 (the alias mapped writable); jmp kCode
  std::vector<uint8_t> other = {0xc6, 0x04, 0x25};
  for (uint8_t b : disp(kAlias + 0x800)) other.push_back(b);
  other.push_back(0x00);
  const uint64_t jmp_at = kOther + other.size();
  other.push_back(0xe9);
  for (uint8_t b : disp(kCode - (jmp_at + 5))) other.push_back(b);
  code(other, kOther);
  // At kCode: L: add rax, 1; mov byte [kAlias + 3], 5 (add's immediate); dec ecx; jnz L; jmp;
  // int3; syscall
  std::vector<uint8_t> loop = {0x48, 0x83, 0xc0, 0x01, 0xc6, 0x04, 0x25};
  for (uint8_t b : disp(kAlias + 3)) loop.push_back(b);
  loop.insert(loop.end(), {0x05, 0xff, 0xc9, 0x75, 0xf0, 0xeb, 0x01, 0xcc, 0x0f, 0x05});
  code(loop);
  regs_.rip = kOther, regs_.rax = 0, regs_.rcx = 2;
  const EmulationRun first = run(UINT64_MAX);
  EXPECT_EQ(first.end, EmulationRun::End::kFault) << "the store through the alias is KVM's";
  EXPECT_EQ(first.retired, 3u);
  ASSERT_EQ(regs_.rip, kCode + 4);
  // KVM executes the store.
  const uint8_t five = 5;
  ASSERT_TRUE(ram_.write(frame(kCode) + 3, std::as_bytes(std::span(&five, 1))));
  regs_.rip += 8;
  const EmulationRun second = run(UINT64_MAX);
  EXPECT_EQ(second.end, EmulationRun::End::kFault);
  EXPECT_EQ(regs_.rax, 6u) << "the second pass added the new immediate";
  EXPECT_EQ(regs_.rip, kCode + 4);
}

// A run from where the last one stopped before its first block (for what that block holds)
// returns at once, without its checks; once the code there changed (found by a run elsewhere),
// it runs again.
TEST_F(UserCodeEmulatorTest, ARunWhereOneStoppedAtOnceReturnsAtOnceUntilTheCodeChanges) {
  code({0x0f, 0xa2});                                                     // cpuid
  code({0x48, 0xff, 0xc0, 0xeb, 0x01, 0xcc, 0x0f, 0x05}, kCode + 0x100);  // inc rax; jmp; syscall
  for (uint64_t known : {0u, 1u}) {
    regs_.rip = kCode;
    const EmulationRun r = run(UINT64_MAX);
    EXPECT_EQ(r.end, EmulationRun::End::kKvmOnly);
    EXPECT_EQ(r.kvm_only, KvmOnly::kNotComputing);
    EXPECT_EQ(r.retired, 0u);
    EXPECT_EQ(regs_.rip, kCode);
    EXPECT_EQ(emulator_.work().known_stops, known);
  }
  // KVM rewrites it: inc rcx; jmp over an int3; syscall
  const std::vector<uint8_t> now = {0x48, 0xff, 0xc1, 0xeb, 0x01, 0xcc, 0x0f, 0x05};
  ASSERT_TRUE(ram_.write(frame(kCode), std::as_bytes(std::span(now))));
  regs_.rip = kCode + 0x100;
  EXPECT_EQ(run(UINT64_MAX).retired, 2u);
  regs_.rip = kCode, regs_.rcx = 0;
  const EmulationRun r = run(UINT64_MAX);
  EXPECT_EQ(r.retired, 2u);
  EXPECT_EQ(regs_.rcx, 1u);
  EXPECT_EQ(emulator_.work().known_stops, 1u);
}

}  // namespace
}  // namespace vmm
