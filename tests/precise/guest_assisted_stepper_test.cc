// The guest-assisted stepper over guest RAM with real page tables: frames written where the kernel
// would write them, code fetched through the task's CR3, the exact LWP record stream of a loop,
// SYSCALL counted on re-entry, trampoline and bad frames ignored.
#include "vmm/precise/guest_assisted_stepper.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <tuple>

#include "guest/abi/pmuvm_abi.h"

namespace vmm {
namespace {

constexpr uint64_t P = 1, W = 2, U = 4, PS = 0x80;
constexpr uint64_t kCr3 = 0x1000, kFrame = 0x5000;

class GuestAssistedStepperTest : public ::testing::Test {
 protected:
  GuestAssistedStepperTest() : ram_(16 << 20) {
    // 2 MiB user page: linear 0x400000 -> physical 0x800000.
    ram_.write_u64(kCr3, 0x2000 | P | W | U);
    ram_.write_u64(0x2000, 0x3000 | P | W | U);
    ram_.write_u64(0x3000 + 2 * 8, 0x800000 | P | W | U | PS);
    pmu::cache::Geometry g;
    g.l1d = {1024, 2, 4};
    g.l2 = {4096, 4, 12};
    g.dram_latency_cycles = 100;
    stepper_ = std::make_unique<GuestAssistedStepper>(ram_, g);
  }
  void code(uint64_t linear, std::vector<uint8_t> bytes) {
    ram_.write(0x800000 + (linear - 0x400000), std::as_bytes(std::span(bytes)));
  }
  // Writes a user frame at kFrame with this RIP (and RBX) and returns its address.
  uint64_t frame(uint64_t rip, uint64_t rbx = 0) {
    pmuvm_trap_frame f{};
    f.rip = rip;
    f.rbx = rbx;
    f.cs = 0x23;
    f.ss = 0x1b;
    ram_.write(kFrame, std::as_bytes(std::span(&f, 1)));
    return kFrame;
  }

  GuestRam ram_;
  std::unique_ptr<GuestAssistedStepper> stepper_;
  StepContext ctx_{kCr3, 0, 0};
};

TEST_F(GuestAssistedStepperTest, LoopGivesOneRetiredInstructionPerStep) {
  code(0x400000, {0x48, 0x8b, 0x03,  // mov rax, [rbx]
                  0x75, 0xfb});      // jne 0x400000
  EXPECT_FALSE(stepper_->on_user_entry(frame(0x400000, 0x400100), ctx_).has_value());
  auto load = stepper_->on_step(frame(0x400003, 0x400100), ctx_);
  ASSERT_TRUE(load.has_value());
  EXPECT_EQ(load->rip, 0x400000u);
  EXPECT_EQ(load->cpl, 3);
  ASSERT_EQ(load->cache_miss_count, 1);
  EXPECT_EQ(load->cache_misses[0].data_address, 0x400100u);
  auto jne = stepper_->on_step(frame(0x400000), ctx_);
  ASSERT_TRUE(jne.has_value());
  EXPECT_EQ(jne->branch.kind, pmu::BranchKind::kConditional);
  EXPECT_TRUE(jne->branch.taken);
}

TEST_F(GuestAssistedStepperTest, SyscallRetiresOnReturnToUser) {
  code(0x400000, {0x0f, 0x05});
  stepper_->on_user_entry(frame(0x400000), ctx_);
  auto sys = stepper_->on_user_entry(frame(0x400002), ctx_);
  ASSERT_TRUE(sys.has_value());
  EXPECT_EQ(sys->rip, 0x400000u);
}

TEST_F(GuestAssistedStepperTest, TrampolineStepIsNotCounted) {
  code(0x400000, {0x0f, 0x05});
  stepper_->on_user_entry(frame(0x400000), ctx_);
  // The host delivered the single-step trap of SYSCALL at the trampoline: the SYSCALL counts...
  auto sys = stepper_->on_step(frame(PMUVM_TRAMPOLINE_VA), ctx_);
  ASSERT_TRUE(sys.has_value());
  EXPECT_EQ(sys->rip, 0x400000u);
  // ...and the trampoline's own instruction, pending when the kernel returns, does not.
  EXPECT_FALSE(stepper_->on_user_entry(frame(0x400002), ctx_).has_value());
}

TEST_F(GuestAssistedStepperTest, BadFramesAreCountedAndIgnored) {
  EXPECT_FALSE(stepper_->on_step(0xFFFFFFFFF000ull, ctx_).has_value());  // outside RAM
  pmuvm_trap_frame kernel_frame{};
  kernel_frame.cs = 0x08;
  ram_.write(kFrame, std::as_bytes(std::span(&kernel_frame, 1)));
  EXPECT_FALSE(stepper_->on_user_entry(kFrame, ctx_).has_value());  // not a user frame
  EXPECT_EQ(stepper_->bad_frames(), 2u);
}

// LWP's #PF trap (guest/abi/pmuvm_abi.h): a #DB step report's frame is rewritten to vector
// PMUVM_VECTOR_LWP_PAGE_FAULT with the error code, everything else unchanged; frames of the
// syscall path (vector 6), kernel frames and the trampoline are left alone.
TEST_F(GuestAssistedStepperTest, MarkPageFaultRewritesOnlyStepReports) {
  auto read = [&] {
    pmuvm_trap_frame f{};
    ram_.read(kFrame, std::as_writable_bytes(std::span(&f, 1)));
    return f;
  };
  auto with_vector = [&](uint64_t rip, uint64_t vector, uint64_t cs) {
    frame(rip, 0x1234);
    ram_.write_u64(kFrame + offsetof(pmuvm_trap_frame, vector), vector);
    ram_.write_u64(kFrame + offsetof(pmuvm_trap_frame, cs), cs);
    return kFrame;
  };
  ASSERT_TRUE(stepper_->mark_page_fault(with_vector(0x400003, 1, 0x23), 0x6));
  pmuvm_trap_frame f = read();
  EXPECT_EQ(f.vector, PMUVM_VECTOR_LWP_PAGE_FAULT);
  EXPECT_EQ(f.error, 0x6u);
  EXPECT_EQ(f.rip, 0x400003u);
  EXPECT_EQ(f.rbx, 0x1234u);
  EXPECT_EQ(f.cs, 0x23u);
  for (auto [rip, vector, cs] : {std::tuple<uint64_t, uint64_t, uint64_t>{0x400003, 6, 0x23},
                                 {0x400003, 1, 0x08},
                                 {PMUVM_TRAMPOLINE_VA, 1, 0x23}}) {
    EXPECT_FALSE(stepper_->mark_page_fault(with_vector(rip, vector, cs), 0x7));
    EXPECT_EQ(read().vector, vector);
    EXPECT_EQ(read().error, 0u);
  }
  EXPECT_FALSE(stepper_->mark_page_fault(64ull << 20, 0x6));  // outside RAM
}

}  // namespace
}  // namespace vmm
