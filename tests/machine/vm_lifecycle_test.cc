// VmLifecycle with threads standing in for vCPUs: the states and their transitions, holds nested
// in the user's pause, work handed to each parked vCPU thread, and the end waking everything.
// Every wait is on a state the lifecycle reports, never on time.
#include "vmm/machine/vm_lifecycle.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace vmm {
namespace {

using State = VmLifecycle::State;

// `n` threads that run a loop like a vCPU's: park while asked, count their "instructions".
class FakeVcpus {
 public:
  explicit FakeVcpus(uint32_t n) : steps_(n), thread_ids_(n), life_(n, [this] { ++kicks_; }) {}
  ~FakeVcpus() { stop(); }
  void start() {
    for (uint32_t i = 0; i < steps_.size(); ++i)
      threads_.emplace_back([this, i] {
        thread_ids_[i] = std::this_thread::get_id();
        while (!life_.ended()) {
          if (life_.must_park()) {
            life_.park(i);
            continue;
          }
          ++steps_[i];
          std::this_thread::yield();
        }
      });
  }
  void stop() {
    life_.end(0);
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }
  VmLifecycle& life() { return life_; }
  std::vector<std::atomic<uint64_t>> steps_;
  std::vector<std::thread::id> thread_ids_;
  std::atomic<int> kicks_{0};

 private:
  VmLifecycle life_;
  std::vector<std::thread> threads_;
};

TEST(VmLifecycle, TheUserPausesAndResumesWithTheErrorsTheApiGives) {
  FakeVcpus v(3);
  v.start();
  VmLifecycle& life = v.life();
  EXPECT_EQ(life.state(), State::kRunning);
  EXPECT_EQ(life.resume_by_user().error().message, "the VM is not paused");
  ASSERT_TRUE(life.pause_by_user().ok());
  EXPECT_EQ(life.state(), State::kPaused);
  EXPECT_GT(v.kicks_, 0);
  // Parked: no vCPU takes a step until resumed.
  std::vector<uint64_t> before;
  for (auto& s : v.steps_) before.push_back(s);
  ASSERT_TRUE(life.hold());  // a hold inside the pause waits for nothing more
  life.release();
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(v.steps_[i], before[i]);
  EXPECT_EQ(life.pause_by_user().error().message, "the VM is already paused");
  ASSERT_TRUE(life.resume_by_user().ok());
  EXPECT_EQ(life.state(), State::kRunning);
  v.stop();
  EXPECT_EQ(life.state(), State::kEnded);
  EXPECT_EQ(life.pause_by_user().error().message, "the VM has ended");
  EXPECT_EQ(life.resume_by_user().error().message, "the VM has ended");
  EXPECT_FALSE(life.hold());
  EXPECT_FALSE(life.shut_down().ok());
}

TEST(VmLifecycle, AHoldOutlivesNoUserPauseAndTheUserPauseOutlivesAHold) {
  FakeVcpus v(2);
  v.start();
  VmLifecycle& life = v.life();
  ASSERT_TRUE(life.hold());
  EXPECT_EQ(life.state(), State::kRunning);  // a hold is not the user's pause
  EXPECT_TRUE(life.must_park());
  life.release();
  EXPECT_FALSE(life.must_park());
  ASSERT_TRUE(life.pause_by_user().ok());
  ASSERT_TRUE(life.hold());
  life.release();
  EXPECT_TRUE(life.must_park());  // still the user's pause
  ASSERT_TRUE(life.resume_by_user().ok());
  EXPECT_FALSE(life.must_park());
}

TEST(VmLifecycle, AProgressPointPausesARunningVmOnceAndIsTheUsersPause) {
  FakeVcpus v(2);
  v.start();
  VmLifecycle& life = v.life();
  life.pause_at_progress();
  EXPECT_EQ(life.state(), State::kPaused);
  EXPECT_TRUE(life.must_park());
  life.pause_at_progress();  // already paused: nothing more
  EXPECT_EQ(life.pause_by_user().error().message, "the VM is already paused");
  ASSERT_TRUE(life.resume_by_user().ok());
  EXPECT_FALSE(life.must_park());
}

TEST(VmLifecycle, WorkRunsOnEachParkedVcpusOwnThread) {
  for (int repeat = 0; repeat < 20; ++repeat) {
    FakeVcpus v(4);
    v.start();
    VmLifecycle& life = v.life();
    ASSERT_TRUE(life.hold());
    std::vector<std::thread::id> ran_on(4);
    life.on_each_vcpu([&](uint32_t i) { ran_on[i] = std::this_thread::get_id(); });
    for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(ran_on[i], v.thread_ids_[i]) << i;
    // Again: each generation of work runs once per vCPU.
    std::atomic<int> runs{0};
    life.on_each_vcpu([&](uint32_t) { ++runs; });
    EXPECT_EQ(runs, 4);
    EXPECT_THROW(life.on_each_vcpu([](uint32_t i) {
      if (i == 2) throw std::runtime_error("unreadable");
    }),
                 VmmError);
    life.release();
  }
}

TEST(VmLifecycle, WorkNeedsAHold) {
  FakeVcpus v(1);
  v.start();
  EXPECT_THROW(v.life().on_each_vcpu([](uint32_t) {}), VmmError);
}

TEST(VmLifecycle, TheFirstEndWinsAndAFailureIsKept) {
  VmLifecycle life(0, [] {});
  EXPECT_TRUE(life.end(7));
  EXPECT_FALSE(life.end(9));
  EXPECT_EQ(life.exit_status(), 7);
  life.fail("a vCPU thread's error", 3);
  EXPECT_EQ(life.exit_status(), 7);
  EXPECT_EQ(life.failure(), "a vCPU thread's error");

  VmLifecycle interrupted(0, [] {});
  interrupted.interrupt(15);
  EXPECT_EQ(interrupted.exit_status(), 128 + 15);
  EXPECT_EQ(interrupted.interrupted_by(), 15);
}

TEST(VmLifecycle, AHandOverEndsTheRunAsHandedOver) {
  FakeVcpus v(2);
  v.start();
  VmLifecycle& life = v.life();
  ASSERT_TRUE(life.hold());  // a migration's final round
  ASSERT_TRUE(life.hand_over().ok());
  EXPECT_EQ(life.state(), State::kHandedOver);
  EXPECT_TRUE(life.ended());
  EXPECT_EQ(life.exit_status(), 0);
  EXPECT_FALSE(life.hand_over().ok());
  v.stop();  // the parked threads left
}

TEST(VmLifecycle, StartsPausedWhenAsked) {
  VmLifecycle life(
      1, [] {}, /*paused=*/true);
  EXPECT_EQ(life.state(), State::kPaused);
  EXPECT_TRUE(life.must_park());
}

// A migration's destination creates its vCPU threads before it says ready: they must not run a
// single instruction until the commit releases them.
TEST(VmLifecycle, AHoldFromStartParksEveryVcpuBeforeItsFirstInstruction) {
  FakeVcpus v(2);
  VmLifecycle& life = v.life();
  life.hold_from_start();
  v.start();
  ASSERT_TRUE(life.hold());  // returns once both are parked: they parked before any step
  EXPECT_EQ(v.steps_[0], 0u);
  EXPECT_EQ(v.steps_[1], 0u);
  EXPECT_EQ(life.state(), State::kRunning);
  life.release();
  life.release();  // the commit
  while (v.steps_[0] == 0 || v.steps_[1] == 0) std::this_thread::yield();
  v.stop();
}

TEST(VmLifecycle, EndingWakesAParkedVcpuAndAWaiter) {
  FakeVcpus v(2);
  v.start();
  VmLifecycle& life = v.life();
  ASSERT_TRUE(life.pause_by_user().ok());
  std::thread waiter([&] {
    while (!life.ended()) life.wait_for_end(1'000'000'000);
  });
  life.end(4);
  waiter.join();
  v.stop();
  EXPECT_EQ(life.exit_status(), 4);
}

}  // namespace
}  // namespace vmm
