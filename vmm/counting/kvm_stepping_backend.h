// The KVM stepper as a counting backend (DESIGN §4.7): the step controller
// (vmm/precise/step_controller.h) decides; this backend reads the vCPU for it, tells it about
// each exit, hands what retired to the PMU models, gives the guest the #DBs that are its own,
// applies the KVM debug configuration the controller wants (only when it changes), and opens
// interrupt windows for the interrupts it holds between user instructions.
#pragma once

#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

#include "vmm/counting/counting_backend.h"
#include "vmm/log_budget.h"
#include "vmm/precise/step_controller.h"

namespace vmm {

// The longest the KVM stepper holds a vCPU's interrupts between user instructions before it lets
// them in: the guest's added interrupt latency. (Wall time: a stepped guest runs a few thousand
// instructions in it. Each look costs two ioctls, so a shorter window makes stepping slower.)
// Interrupts the PMU models raise do not wait: their window opens after the instruction that
// raised them.
constexpr uint64_t kInterruptWindowNs = 4'000'000;
// The longest it holds them without a window when no interrupt seems to wait.
constexpr uint64_t kForcedWindowNs = 10'000'000;
// A vCPU holding interrupts is kicked when this long passed without a look at its window (see
// Machine's release ticker): at most ~3 kInterruptWindowNs of held interrupts when it stops
// exiting.
constexpr uint64_t kHoldingWatchNs = 2 * kInterruptWindowNs;
// How often (in exits) a vCPU whose interrupts are held looks at the clock for the limits above:
// 16 exits are ~16 µs of stepping on bare metal, ~1 ms in the nested host.
constexpr uint32_t kExitsPerClockRead = 16;

// The host backend's free run, as the stepper beneath it sees it (host_counter_backend.h).
class UnseenRun {
 public:
  virtual ~UnseenRun() = default;
  // A free run is armed.
  virtual bool active() const = 0;
  // The guest is stepped through it (the counter double): its steps go to count(), and a block
  // ends where the double's overflow is due (instructions_to_kick).
  virtual bool stepped() const = 0;
  virtual uint64_t instructions_to_kick() const = 0;
  virtual void count(const RetiredInstructions& retired) = 0;
};

// What counts on `pmu` now (DESIGN §4.7): nothing, user code only (LWP; NetBurst without T0_OS),
// or every CPL (a NetBurst counter with T0_OS).
StepScope step_scope(VcpuPmu& pmu);
// How many instructions may retire before the PMU models (or a --pause-at-instructions point)
// show something: the longest block the stepper may run now.
uint64_t quiet_retirements(CountedVcpu& vcpu);

class KvmSteppingBackend : public CountingBackend {
 public:
  // `block_steps`: kvm (blocks where it can) rather than kvm-single. `trap_flag_steps`: the
  // controller may single-step with TF (one vCPU). `unseen`: the host backend above, if any.
  KvmSteppingBackend(CountedVcpu& vcpu, GuestRam& ram, const pmu::cache::Geometry& cache,
                     bool block_steps, bool trap_flag_steps, UnseenRun* unseen = nullptr);

  void before_run() override;
  void after_run(bool kicked, bool debug_exit) override;
  void on_debug_exit() override;
  void after_exit(bool raised, bool kicked) override;
  uint64_t holding_since_ns() const override { return holding_since_ns_.load(); }
  void save_state(StateSections& s, const std::string& prefix) override;
  void load_state(const StateSections& s, const std::string& prefix) override;
  void log_closing_lines() const override;
  Steps steps() const override;
  void print_stats(std::FILE* out, const ExitTally& exits) const override;

  // Hands retirements to the PMU models (to the free run's double while one is active). The
  // exit is the boundary after the last one: at CPL 0 that instruction was a SYSCALL or INT n
  // reported at its kernel entry, whose user #PF cannot be delivered in the kernel; nor can one
  // of an earlier instruction of the same report.
  void retire_all(const RetiredInstructions& retired, uint8_t cpl, uint64_t cr3);

  // The step controller, for tests that drive it without KVM (tests/fuzz/machine_state_fuzz.cc)
  // and the emulator in front of it (emulating_backend.h).
  StepController& controller() { return stepper_; }
  // The guest's own DR0-3/DR6/DR7 as last read (current in user mode: they change only through
  // the kernel, and are read again at every return to user mode).
  const GuestDebugRegisters& guest_debug() const { return guest_debug_; }

 private:
  // Before each KVM_RUN: the step controller's scope and the KVM debug configuration it wants.
  void update_stepping();
  // After an exit: opens an interrupt window when the PMU models just raised an interrupt
  // (`raised`) or interrupts have been held for kInterruptWindowNs (StepController's header).
  void interrupt_window(bool raised, bool kicked);

  CountedVcpu& vcpu_;
  StepController stepper_;
  UnseenRun* unseen_;
  DebugConfig applied_debug_;        // what KVM_SET_GUEST_DEBUG last got
  GuestDebugRegisters guest_debug_;  // the guest's own DR0-3/DR7, as last read
  // Restored from a snapshot: KVM holds none of the guest-debug state `applied_debug_`
  // describes, so update_stepping issues it once whatever it says.
  bool debug_unknown_ = false;
  // Since when this vCPU's interrupts are held without a window or a look for pending ones (0:
  // they are not; published by the vCPU thread, read by the release ticker).
  std::atomic<uint64_t> holding_since_ns_{0};
  uint64_t last_window_ns_ = 0;       // when the stepper last opened an interrupt window
  uint32_t exits_without_clock_ = 0;  // interrupt_window: exits since it last read the clock
  bool window_owed_ = false;  // an interrupt was raised while held: a window at the first chance
  LogBudget dropped_debug_warnings_{8};  // the guest's own #DBs that met a pending exception
  // Asked once: spdlog's level check goes through its registry, a visible cost at every step.
  const bool trace_steps_ = spdlog::should_log(spdlog::level::trace);
};

// A backend that counts through the KVM stepper beneath it (the host backend, the emulator):
// every call it does not take over goes to the stepper, whose state is the backend's own.
class OverKvmStepping : public CountingBackend {
 public:
  template <typename... Args>
  explicit OverKvmStepping(Args&&... stepping) : stepping_(std::forward<Args>(stepping)...) {}

  void before_run() override { stepping_.before_run(); }
  void after_run(bool kicked, bool debug_exit) override { stepping_.after_run(kicked, debug_exit); }
  void on_debug_exit() override { stepping_.on_debug_exit(); }
  void after_exit(bool raised, bool kicked) override { stepping_.after_exit(raised, kicked); }
  uint64_t holding_since_ns() const override { return stepping_.holding_since_ns(); }
  void save_state(StateSections& s, const std::string& prefix) override {
    stepping_.save_state(s, prefix);
  }
  void load_state(const StateSections& s, const std::string& prefix) override {
    stepping_.load_state(s, prefix);
  }
  void log_closing_lines() const override { stepping_.log_closing_lines(); }
  Steps steps() const override { return stepping_.steps(); }
  void print_stats(std::FILE* out, const ExitTally& exits) const override {
    stepping_.print_stats(out, exits);
  }

 protected:
  KvmSteppingBackend stepping_;
};

}  // namespace vmm
