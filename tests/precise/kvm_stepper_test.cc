// The KVM stepper over guest RAM with real page tables: a stream of single-step states (after each
// instruction, with its CPL) becomes retired instructions. The rules of vmm/precise/kvm_stepper.h,
// one test each: user steps, CPL-0 steps counted as CPL-0 instructions, the IRETQ into user mode
// (and an unannounced return's trap after one user instruction),
// SYSCALL counted at re-entry (RIP + 2, same CR3) or at its entry-point trap, an interrupted or
// faulting instruction (LLWPCB's #UD) never counted, kicks changing nothing.
#include "vmm/precise/kvm_stepper.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <span>

#include "guest/abi/pmuvm_abi.h"

namespace vmm {
namespace {

constexpr uint64_t P = 1, W = 2, U = 4, PS = 0x80;
constexpr uint64_t kCr3 = 0x1000, kLstar = 0x7FFFFFFFE000;
// Kernel code: identity-mapped 2 MiB page at linear/physical 0x200000 (supervisor).
constexpr uint64_t kKernel = 0x200000;

class KvmStepperTest : public ::testing::Test {
 protected:
  KvmStepperTest() : ram_(16 << 20) {
    ram_.write_u64(kCr3, 0x2000 | P | W | U);
    ram_.write_u64(0x2000, 0x3000 | P | W | U);
    ram_.write_u64(0x3000 + 1 * 8, kKernel | P | W | PS);              // 0x200000: kernel
    ram_.write_u64(0x3000 + 2 * 8, 0x800000 | P | W | U | PS);         // 0x400000: user
    pmu::cache::Geometry g;
    g.l1d = {1024, 2, 4};
    g.l2 = {4096, 4, 12};
    g.dram_latency_cycles = 100;
    stepper_ = std::make_unique<KvmStepper>(ram_, g, kLstar);
  }
  void user_code(std::vector<uint8_t> bytes) {
    ram_.write(0x800000, std::as_bytes(std::span(bytes)));
  }
  void kernel_code(std::vector<uint8_t> bytes) {
    ram_.write(kKernel, std::as_bytes(std::span(bytes)));
  }
  static GuestRegisters at(uint64_t rip, uint64_t cr3 = kCr3) {
    GuestRegisters r{};
    r.rip = rip;
    r.cr3 = cr3;
    return r;
  }
  // One report; these cases retire at most one instruction per report.
  std::optional<pmu::RetiredInstruction> step(uint64_t rip, uint8_t cpl, uint64_t cr3 = kCr3) {
    Retirements r = stepper_->on_step(at(rip, cr3), cpl, cr3);
    EXPECT_LE(r.size(), 1u) << "at rip " << std::hex << rip;
    if (r.empty()) return std::nullopt;
    return r[0];
  }

  static constexpr uint64_t kStack = kKernel + 0x1000;  // kernel stack: an IRETQ frame there
  void set_frame(uint64_t rip) {
    for (uint64_t i = 0; const uint64_t v : std::initializer_list<uint64_t>{rip, 0x33, 0x202, 0x401000, 0x2b})
      ram_.write_u64(kStack + 8 * i++, v);  // RIP, CS (RPL 3), RFLAGS, RSP, SS
  }

  GuestRam ram_;
  std::unique_ptr<KvmStepper> stepper_;
};

TEST_F(KvmStepperTest, UserStepsCountThePreviousInstruction) {
  user_code({0x90, 0x90, 0xeb, 0xfc});  // nop; nop; jmp 0x400000
  EXPECT_FALSE(step(0x400000, 3).has_value());  // first step into user mode: the pre-state
  auto nop = step(0x400001, 3);
  ASSERT_TRUE(nop.has_value());
  EXPECT_EQ(nop->rip, 0x400000u);
  EXPECT_EQ(nop->cpl, 3);
  step(0x400002, 3);
  auto jmp = step(0x400000, 3);
  ASSERT_TRUE(jmp.has_value());
  EXPECT_EQ(jmp->rip, 0x400002u);
  EXPECT_TRUE(jmp->branch.taken);
  EXPECT_EQ(stepper_->user_steps(), 4u);
}

TEST_F(KvmStepperTest, KernelStepsAreCplZeroInstructionsAndIretqRetiresIntoUserMode) {
  kernel_code({0x90, 0x48, 0xcf});  // nop; iretq
  user_code({0x90});
  EXPECT_FALSE(step(kKernel, 0).has_value());
  auto nop = step(kKernel + 1, 0);
  ASSERT_TRUE(nop.has_value());
  EXPECT_EQ(nop->cpl, 0);
  auto iretq = step(0x400000, 3);  // the trap after IRETQ lands in user mode
  ASSERT_TRUE(iretq.has_value());
  EXPECT_EQ(iretq->rip, kKernel + 1);
  EXPECT_EQ(iretq->cpl, 0);
  auto user = step(0x400001, 3);
  ASSERT_TRUE(user.has_value());
  EXPECT_EQ(user->cpl, 3);
  EXPECT_EQ(stepper_->kernel_steps(), 2u);
}

// An unannounced return (the NMI handler's IRETQ) restores TF; the trap comes after one user
// instruction, and reaches the VMM: that instruction counts, with the trap's state after it.
TEST_F(KvmStepperTest, UnannouncedReturnCountsTheOneInstructionThatRan) {
  user_code({0xb8, 0x01, 0x00, 0x00, 0x00, 0x90, 0x90});  // mov eax, 1; nop; nop
  step(0x400000, 3);
  stepper_->on_other_exit(0);  // the NMI handler's MSR exits
  GuestRegisters after = at(0x400005);
  after.rax = 1;
  Retirements r = stepper_->on_unannounced_return(after);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].rip, 0x400000u);
  EXPECT_EQ(stepper_->unannounced_returns(), 1u);
  auto nop = step(0x400006, 3);  // stepping goes on from the trap's state
  ASSERT_TRUE(nop.has_value());
  EXPECT_EQ(nop->rip, 0x400005u);
}

// A trap somewhere the pending instruction does not lead (another path ran) counts nothing.
TEST_F(KvmStepperTest, UnannouncedReturnElsewhereCountsNothing) {
  user_code({0x90, 0x90, 0x90, 0x90});
  step(0x400000, 3);
  stepper_->on_other_exit(0);
  EXPECT_TRUE(stepper_->on_unannounced_return(at(0x400003)).empty());
  EXPECT_EQ(stepper_->unannounced_returns(), 0u);
}

// The #UD handler's IRETQ resumes after an emulated LLWPCB: that instruction did not retire.
TEST_F(KvmStepperTest, IretqPastAnEmulatedLlwpcbDoesNotCountIt) {
  kernel_code({0x48, 0xcf});
  user_code({0x8f, 0xe9, 0xf8, 0x12, 0xc0, 0x90});  // llwpcb rax; nop
  set_frame(0x400005);
  step(0x400000, 3);
  GuestRegisters k = at(kKernel);
  k.rsp = kStack;
  stepper_->on_step(k, 0, kCr3);
  Retirements r = stepper_->on_step(at(0x400005), 3, kCr3);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].cpl, 0);  // only the IRETQ
}

// A frame that points elsewhere (a kernel that redirects the task) counts nothing either.
TEST_F(KvmStepperTest, IretqToAnUnrelatedRipDoesNotCountThePendingInstruction) {
  kernel_code({0x48, 0xcf});
  user_code({0x90, 0x90, 0x90, 0x90});
  set_frame(0x400003);
  step(0x400000, 3);
  GuestRegisters k = at(kKernel);
  k.rsp = kStack;
  stepper_->on_step(k, 0, kCr3);
  EXPECT_EQ(stepper_->on_step(at(0x400003), 3, kCr3).size(), 1u);  // the IRETQ only
}

// PMUVM_MSR_USER_ENTRY: the kernel's trap frame (what its IRETQ restores) at a guest-physical
// address. The kernel runs free to the frame's RIP; stepping starts there.
class KvmStepperUserEntryTest : public KvmStepperTest {
 protected:
  static constexpr uint64_t kFrame = 0x300000;
  void frame_at(uint64_t rip, uint64_t rax = 0) {
    pmuvm_trap_frame f{};
    f.rip = rip, f.cs = 0x33, f.rflags = 0x202, f.rsp = 0x401000, f.ss = 0x2b, f.rax = rax;
    ram_.write(kFrame, std::as_bytes(std::span(&f, 1)));
  }
  Retirements user_entry() {
    return stepper_->on_user_entry(kFrame, StepContext{kCr3, 0, 0});
  }
};

TEST_F(KvmStepperUserEntryTest, RunsToTheFramesRipThenCountsFromThere) {
  user_code({0x90, 0x90});
  frame_at(0x400000);
  EXPECT_TRUE(user_entry().empty());
  ASSERT_TRUE(stepper_->resume_rip().has_value());
  EXPECT_EQ(*stepper_->resume_rip(), 0x400000u);
  stepper_->on_other_exit(0);  // e.g. another PV MSR on the way out
  stepper_->on_user_arrival(at(0x400000));
  EXPECT_FALSE(stepper_->resume_rip().has_value());
  auto nop = step(0x400001, 3);
  ASSERT_TRUE(nop.has_value());
  EXPECT_EQ(nop->rip, 0x400000u);
  EXPECT_EQ(stepper_->kernel_steps(), 0u);  // the return path was not stepped
}

TEST_F(KvmStepperUserEntryTest, AReturnRightAfterASyscallCountsIt) {
  user_code({0x0f, 0x05, 0x90});
  step(0x400000, 3);
  stepper_->on_other_exit(0);
  frame_at(0x400002);
  Retirements r = user_entry();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].rip, 0x400000u);
}

TEST_F(KvmStepperUserEntryTest, AKernelFrameIsRefused) {
  frame_at(0x400000);
  ram_.write_u64(kFrame + offsetof(pmuvm_trap_frame, cs), 0x8);  // CPL 0: not a return to user
  EXPECT_TRUE(user_entry().empty());
  EXPECT_FALSE(stepper_->resume_rip().has_value());
  EXPECT_EQ(stepper_->bad_frames(), 1u);
}

// An IRETQ whose trap arrives where its frame points is the normal case: nothing is rebuilt.
TEST_F(KvmStepperTest, IretqTrapAtItsFrameRipRebuildsNothing) {
  kernel_code({0x48, 0xcf});
  user_code({0x90});
  set_frame(0x400000);
  GuestRegisters k = at(kKernel);
  k.rsp = kStack;
  stepper_->on_step(k, 0, kCr3);
  EXPECT_EQ(stepper_->on_step(at(0x400000), 3, kCr3).size(), 1u);  // the IRETQ only
}

// Measured on the nested AMD host: SYSCALL with TF raises no trap (FMASK clears TF); the next
// exit is at CPL 0 (the kernel's PV MSR), and user mode comes back at RIP + 2.
TEST_F(KvmStepperTest, SyscallCountsWhenUserModeResumesRightAfterIt) {
  user_code({0x0f, 0x05, 0x90});
  step(0x400000, 3);
  stepper_->on_other_exit(0);
  auto sys = step(0x400002, 3);
  ASSERT_TRUE(sys.has_value());
  EXPECT_EQ(sys->rip, 0x400000u);
  EXPECT_FALSE(sys->is_branch());
  auto nop = step(0x400003, 3);
  ASSERT_TRUE(nop.has_value());
  EXPECT_EQ(nop->rip, 0x400002u);
}

TEST_F(KvmStepperTest, SyscallTrapAtTheEntryPointCountsOnce) {
  user_code({0x0f, 0x05, 0x90});
  step(0x400000, 3);
  auto sys = step(kLstar, 0);  // a host that delivers SYSCALL's trap at LSTAR
  ASSERT_TRUE(sys.has_value());
  EXPECT_EQ(sys->rip, 0x400000u);
  stepper_->stop();  // nothing counts in the kernel: stepping stops until the return
  EXPECT_FALSE(step(0x400002, 3).has_value());  // not counted a second time at the re-entry
}

TEST_F(KvmStepperTest, InterruptBeforeSyscallDoesNotCountIt) {
  user_code({0x0f, 0x05});
  step(0x400000, 3);
  stepper_->on_other_exit(0);  // an interrupt: the handler's EOI or PV MSR exit
  EXPECT_FALSE(step(0x400000, 3).has_value());  // back at the SYSCALL, which has not run
  stepper_->on_other_exit(0);
  EXPECT_TRUE(step(0x400002, 3).has_value());  // now it ran
}

TEST_F(KvmStepperTest, EmulatedLlwpcbDoesNotRetire) {
  user_code({0x8f, 0xe9, 0xf8, 0x12, 0xc0, 0x90});  // llwpcb rax (#UD, emulated); nop
  step(0x400000, 3);
  stepper_->on_other_exit(0);  // the kernel's WRMSR LWPMSR1
  EXPECT_FALSE(step(0x400005, 3).has_value());  // resumes after it: not a SYSCALL, not counted
  auto nop = step(0x400006, 3);
  ASSERT_TRUE(nop.has_value());
  EXPECT_EQ(nop->rip, 0x400005u);  // the first counted instruction is the one after LLWPCB
}

TEST_F(KvmStepperTest, OtherAddressSpaceAtRipPlusTwoIsNotTheSyscallsReturn) {
  user_code({0x0f, 0x05});
  step(0x400000, 3);
  stepper_->on_other_exit(0);
  EXPECT_FALSE(step(0x400002, 3, /*cr3=*/0x5000).has_value());
}

TEST_F(KvmStepperTest, AnExitAtCplThreeKeepsThePendingInstruction) {
  user_code({0x90, 0x90});
  step(0x400000, 3);
  stepper_->on_other_exit(3);  // e.g. a kick between two steps
  auto nop = step(0x400001, 3);
  ASSERT_TRUE(nop.has_value());
  EXPECT_EQ(nop->rip, 0x400000u);
}

}  // namespace
}  // namespace vmm
