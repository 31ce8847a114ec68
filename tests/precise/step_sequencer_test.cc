// Step reports -> retired instructions: pre-state from the previous report, bytes fetched from
// guest memory (also across a page boundary), SYSCALL counted on re-entry, interrupted
// instructions dropped, trampolines ignored.
#include "vmm/precise/step_sequencer.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>

#include "pmu/state_archive.h"
#include "tests/support/fake_guest_memory.h"

namespace vmm {
namespace {

pmu::cache::Geometry geometry() {
  pmu::cache::Geometry g;
  g.l1d = {1024, 2, 4};
  g.l2 = {4096, 4, 12};
  g.l3 = {};
  g.dram_latency_cycles = 100;
  return g;
}

class StepSequencerTest : public ::testing::Test {
 protected:
  StepSequencerTest() : accountant_(geometry()), seq_(accountant_, mem_) {
    mem_.map(0x400000, 0x2000);
    mem_.map(0x600000, 0x1000);
  }
  void code(uint64_t at, std::vector<uint8_t> bytes) {
    mem_.poke(at, std::as_bytes(std::span(bytes)));
  }
  GuestRegisters at(uint64_t rip, uint64_t rbx = 0) {
    GuestRegisters r{};
    r.rip = rip;
    r.rbx = rbx;
    return r;
  }

  pmu::testing::FakeGuestMemory mem_;
  StepAccountant accountant_;
  StepSequencer seq_;
};

TEST_F(StepSequencerTest, EachStepAccountsThePreviousInstructionWithItsPreState) {
  code(0x400000, {0x48, 0x8b, 0x03,  // mov rax, [rbx]
                  0x75, 0xfb});      // jne 0x400000
  EXPECT_FALSE(seq_.enter_user(at(0x400000, 0x600000)).has_value());
  // After the load: rbx changed by the program afterwards must not matter for this load.
  auto load = seq_.step(at(0x400003, 0x999999));
  ASSERT_TRUE(load.has_value());
  EXPECT_EQ(load->rip, 0x400000u);
  ASSERT_EQ(load->cache_miss_count, 1);
  EXPECT_EQ(load->cache_misses[0].data_address, 0x600000u);
  auto branch = seq_.step(at(0x400000));
  ASSERT_TRUE(branch.has_value());
  EXPECT_EQ(branch->rip, 0x400003u);
  EXPECT_EQ(branch->branch.kind, pmu::BranchKind::kConditional);
  EXPECT_TRUE(branch->branch.taken);
  EXPECT_EQ(branch->branch.next_rip, 0x400000u);
}

// A REP string instruction under TF traps after every iteration with RIP unchanged: those traps
// are not retirements (DESIGN §4.7). It retires once, with the registers it started with, when
// RIP moves on.
TEST_F(StepSequencerTest, RepStringRetiresOnceAcrossItsIterationTraps) {
  code(0x400000, {0xf3, 0xaa,  // rep stosb
                  0x90});      // nop
  GuestRegisters start = at(0x400000);
  start.rcx = 3, start.rdi = 0x600000;
  seq_.enter_user(start);
  for (uint64_t left = 2; left >= 1; --left) {
    GuestRegisters iteration = at(0x400000);
    iteration.rcx = left, iteration.rdi = 0x600000 + 3 - left;
    EXPECT_FALSE(seq_.step(iteration).has_value()) << left << " iterations left";
  }
  GuestRegisters done = at(0x400002);
  done.rdi = 0x600003;
  const auto rep = seq_.step(done);
  ASSERT_TRUE(rep.has_value());
  EXPECT_EQ(rep->rip, 0x400000u);
  const auto nop = seq_.step(at(0x400003));
  ASSERT_TRUE(nop.has_value());
  EXPECT_EQ(nop->rip, 0x400002u);
}

TEST_F(StepSequencerTest, SyscallCountsWhenUserModeIsReentered) {
  code(0x400000, {0x0f, 0x05, 0x90});  // syscall; nop
  seq_.enter_user(at(0x400000));
  // The kernel handles the syscall and returns to the next instruction.
  auto sys = seq_.enter_user(at(0x400002));
  ASSERT_TRUE(sys.has_value());
  EXPECT_EQ(sys->rip, 0x400000u);
  EXPECT_FALSE(sys->is_branch());  // SYSCALL is not a branch (§4.2)
}

// An interrupt taken just before a SYSCALL: user mode is re-entered at the SYSCALL itself, which
// has not run yet. Its bytes are 0F 05, but it must not count (it counts when it really retires).
TEST_F(StepSequencerTest, InterruptBeforeSyscallDoesNotCountIt) {
  code(0x400000, {0x0f, 0x05, 0x90});
  seq_.enter_user(at(0x400000));
  EXPECT_FALSE(seq_.enter_user(at(0x400000)).has_value());
  EXPECT_EQ(seq_.dropped(), 1u);
  auto sys = seq_.enter_user(at(0x400002));
  ASSERT_TRUE(sys.has_value());
  EXPECT_EQ(sys->rip, 0x400000u);
}

// A SYSCALL whose task was switched out: another address space re-entering at the same RIP + 2
// (two copies of one program) is not the SYSCALL's return.
TEST_F(StepSequencerTest, SyscallCountsOnlyInItsOwnAddressSpace) {
  code(0x400000, {0x0f, 0x05, 0x90});
  GuestRegisters before = at(0x400000);
  before.cr3 = 0x1000;
  seq_.enter_user(before);
  GuestRegisters other = at(0x400002);
  other.cr3 = 0x2000;
  EXPECT_FALSE(seq_.enter_user(other).has_value());
}

// A task switched out inside its SYSCALL (yield): another address space runs (and makes its own
// SYSCALL), then the first returns right after its SYSCALL. Each SYSCALL counts once, when its
// own address space resumes after it.
TEST_F(StepSequencerTest, SyscallOfASwitchedOutTaskCountsWhenItResumes) {
  code(0x400000, {0x0f, 0x05, 0x90});
  GuestRegisters a = at(0x400000), b = at(0x400000);
  a.cr3 = 0x1000;
  b.cr3 = 0x2000;
  seq_.enter_user(a);                            // task A about to SYSCALL (yield)
  EXPECT_FALSE(seq_.enter_user(b).has_value());  // switched to B, about to SYSCALL too
  GuestRegisters a_back = at(0x400002), b_back = at(0x400002);
  a_back.cr3 = 0x1000;
  b_back.cr3 = 0x2000;
  auto sys_a = seq_.enter_user(a_back);
  ASSERT_TRUE(sys_a.has_value());
  EXPECT_EQ(sys_a->rip, 0x400000u);
  auto sys_b = seq_.enter_user(b_back);
  ASSERT_TRUE(sys_b.has_value());
  EXPECT_EQ(seq_.dropped(), 0u);
}

// The guest chooses how many address spaces leave user mode inside a SYSCALL: the parked
// pre-states have a budget (kMaxParked), beyond which a pending instruction is dropped and
// counted, never kept (issue 38: ~11 GiB for a 16-vCPU guest before). The parked ones settle as
// before, and a state holding more is refused on load.
TEST_F(StepSequencerTest, ParkedAddressSpacesHaveABudget) {
  code(0x400000, {0x0f, 0x05, 0x90});
  const uint64_t tasks = StepSequencer::kMaxParked + 10;
  for (uint64_t i = 0; i <= tasks; ++i) {  // each task about to SYSCALL; the next one runs
    GuestRegisters r = at(0x400000);
    r.cr3 = 0x1000 * (i + 1);
    seq_.enter_user(r);
  }
  EXPECT_EQ(seq_.dropped(), 10u);  // tasks 0..kMaxParked-1 parked, 10 found no room
  GuestRegisters back = at(0x400002);
  back.cr3 = 0x1000;  // the first parked task returns from its SYSCALL: counted
  EXPECT_TRUE(seq_.enter_user(back).has_value());

  pmu::StateWriter w;
  w(seq_);
  StepSequencer loaded(accountant_, mem_);
  pmu::StateReader r(w.bytes());
  r(loaded);  // within the budget: reads back
  r.expect_end();

  // The sequencer's archive laid out by hand, with one parked entry more than the budget.
  struct Crafted {
    std::optional<GuestRegisters> pending;
    std::map<uint64_t, GuestRegisters> parked;
    uint64_t dropped = 0, unreadable = 0;
    void archive(pmu::StateWriter& a) { a(pending, parked, dropped, unreadable); }
  } crafted;
  for (uint64_t i = 0; i <= StepSequencer::kMaxParked; ++i) crafted.parked[0x1000 * (i + 1)] = {};
  pmu::StateWriter cw;
  cw(crafted);
  pmu::StateReader cr(cw.bytes());
  try {
    cr(loaded);
    ADD_FAILURE() << "loaded";
  } catch (const pmu::StateFormatError& e) {
    EXPECT_EQ(std::string(e.what()), "step sequencer: 8193 parked address spaces (at most 8192)");
  }
}

TEST_F(StepSequencerTest, LeavingUserModeForgetsThePendingInstruction) {
  code(0x400000, {0x0f, 0x05});
  seq_.enter_user(at(0x400000));
  seq_.leave_user();  // e.g. the task was switched out: its state is reported again on entry
  EXPECT_FALSE(seq_.enter_user(at(0x400002)).has_value());
}

TEST_F(StepSequencerTest, InterruptedInstructionIsDropped) {
  code(0x400000, {0x90, 0x90});
  seq_.enter_user(at(0x400000));
  EXPECT_FALSE(seq_.enter_user(at(0x400000)).has_value());  // timer interrupt, back to same RIP
  EXPECT_EQ(seq_.dropped(), 1u);
  auto nop = seq_.step(at(0x400001));
  ASSERT_TRUE(nop.has_value());
  EXPECT_EQ(nop->rip, 0x400000u);
}

TEST_F(StepSequencerTest, InstructionStraddlingAPageBoundaryIsFetchedWhole) {
  code(0x400FFE, {0x48, 0x8b, 0x03});  // mov rax, [rbx] across 0x401000
  seq_.enter_user(at(0x400FFE, 0x600040));
  auto load = seq_.step(at(0x401001));
  ASSERT_TRUE(load.has_value());
  ASSERT_EQ(load->cache_miss_count, 1);
  EXPECT_EQ(load->cache_misses[0].data_address, 0x600040u);
}

TEST_F(StepSequencerTest, ShortInstructionAtTheLastMappedPageEndDecodes) {
  code(0x401FFF, {0x90});  // nop in the last byte of the mapping
  seq_.enter_user(at(0x401FFF));
  EXPECT_TRUE(seq_.step(at(0x402000)).has_value());
  EXPECT_EQ(seq_.unreadable(), 0u);
}

TEST_F(StepSequencerTest, UnmappedCodeIsCountedAsUnreadable) {
  seq_.enter_user(at(0x700000));
  EXPECT_FALSE(seq_.step(at(0x700001)).has_value());
  EXPECT_EQ(seq_.unreadable(), 1u);
}

TEST_F(StepSequencerTest, TrampolineStepsNeverCount) {
  code(0x401000, {0x90, 0x90});
  seq_.ignore_range(0x401000, 0x402000);
  seq_.enter_user(at(0x401000));
  EXPECT_FALSE(seq_.step(at(0x401001)).has_value());
}

}  // namespace
}  // namespace vmm
