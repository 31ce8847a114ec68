// The life of a running VM as one state with its valid transitions (Cloud Hypervisor's VmState),
// and the parking of its vCPUs that pausing needs:
//
//   running --pause_by_user / pause_at_progress--> paused --resume_by_user--> running
//   running | paused --end (guest exit, failure, signal, vm.shutdown)--> ended
//   running | paused --hand_over (a migration's destination took the VM)--> handed over
//
// Independent of the user's pause, short holds (a snapshot, a migration's final round, vm.pmu,
// --debug-pause-every) park every vCPU for their work and let them go again; they nest inside a
// user's pause, which outlives them. Every vCPU is parked while the VM is paused or held; work
// that must run on each vCPU's own thread (KVM's vCPU state: kvm_vcpu.h) is handed to the parked
// threads with on_each_vcpu().
//
// Thread-safe. vCPU threads call must_park() / park() / ended(); the API, the migration and the
// run's own threads call the rest.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "vmm/result.h"

namespace vmm {

class VmLifecycle {
 public:
  enum class State : uint8_t { kRunning, kPaused, kEnded, kHandedOver };
  static const char* name(State s);  // "running", "paused", "ended", "handed over"

  // `vcpus`: how many vCPU threads park; `kick_all` makes each leave KVM_RUN so that it parks.
  // `paused`: the VM starts in the user's pause (run --paused).
  VmLifecycle(uint32_t vcpus, std::function<void()> kick_all, bool paused = false);

  State state() const;

  // The user's pause (vm.pause): running -> paused, returning once every vCPU is parked. Errors
  // (409 for the API): the VM has ended, or is already paused.
  Status pause_by_user();
  // vm.resume: paused -> running. Errors: the VM has ended, or is not paused.
  Status resume_by_user();
  // A progress point (run --pause-on-output, --pause-at-instructions): running -> paused, the
  // user's pause from now on (vm.resume ends it). Called on a vCPU thread, which parks at the top
  // of its loop, so it does not wait; a VM already paused or ended stays so.
  void pause_at_progress();

  // A short hold: every vCPU parked between instructions until release(). False, with nothing
  // held, when the VM ended meanwhile (nothing to save or hand over then).
  bool hold();
  void release();
  // A hold taken before the vCPU threads start (a migration's destination creates them before it
  // says ready): each parks before its first instruction; release() lets them run.
  void hold_from_start();
  // While held: `work(index)` on each vCPU's own thread, returning when all are done. The first
  // exception thrown there is thrown here.
  void on_each_vcpu(const std::function<void(uint32_t index)>& work);

  // The run ends with `status` (the first end wins; later ones change nothing): every parked vCPU
  // and wait_for_end() wake up. True for the call that ended it.
  bool end(int status);
  // The run fails (status 3) with `reason`, unless it ended already.
  void fail(const std::string& reason, int status);
  // SIGINT/SIGTERM: the run ends with 128 + `sig`.
  void interrupt(int sig);
  // A migration handed the VM to its destination (held): the run ends with status 0, no report.
  Status hand_over();
  // vm.shutdown: the run ends with status 0. Error: it has ended already.
  Status shut_down();

  bool ended() const { return ended_.load(std::memory_order_acquire); }
  int exit_status() const;
  std::string failure() const;  // "" unless fail()ed
  int interrupted_by() const;   // the signal that ended the run, or 0

  // Waits until the run ends or `timeout_ns` passed.
  void wait_for_end(uint64_t timeout_ns);

  // ---- vCPU threads ---------------------------------------------------------------------------
  // The vCPU should park at its next boundary (paused or held).
  bool must_park() const { return park_requested_.load(std::memory_order_acquire); }
  // Waits, counted as parked, until the VM may run on or ends; runs the work on_each_vcpu hands
  // it meanwhile.
  void park(uint32_t index);

 private:
  void update_park_request();  // under lock_
  bool all_parked() const { return parked_ == vcpus_; }

  mutable std::mutex lock_;
  std::condition_variable changed_;
  const uint32_t vcpus_;
  std::function<void()> kick_all_;
  State state_;
  uint32_t holds_ = 0;
  uint32_t parked_ = 0;
  std::atomic<bool> park_requested_{false};
  std::atomic<bool> ended_{false};
  int exit_status_ = 0;
  std::string failure_;
  int interrupted_by_ = 0;
  // on_each_vcpu: the work, a generation number per hand-out, the vCPUs that did it.
  const std::function<void(uint32_t)>* work_ = nullptr;
  uint64_t work_generation_ = 0;
  std::vector<uint64_t> done_generation_;
  uint32_t work_left_ = 0;
  uint32_t working_ = 0;  // vCPUs inside `work_` now
  std::string work_error_;
};

}  // namespace vmm
