#include "vmm/machine/vm_lifecycle.h"

#include <chrono>
#include <exception>
#include <string>

namespace vmm {

const char* VmLifecycle::name(State s) {
  switch (s) {
    case State::kRunning: return "running";
    case State::kPaused: return "paused";
    case State::kEnded: return "ended";
    case State::kHandedOver: return "handed over";
  }
  return "?";
}

VmLifecycle::VmLifecycle(uint32_t vcpus, std::function<void()> kick_all, bool paused)
    : vcpus_(vcpus),
      kick_all_(std::move(kick_all)),
      state_(paused ? State::kPaused : State::kRunning),
      done_generation_(vcpus, 0) {
  update_park_request();
}

VmLifecycle::State VmLifecycle::state() const {
  std::lock_guard<std::mutex> g(lock_);
  return state_;
}

void VmLifecycle::update_park_request() {
  park_requested_.store(!ended_ && (state_ == State::kPaused || holds_ > 0),
                        std::memory_order_release);
}

Status VmLifecycle::pause_by_user() {
  {
    std::lock_guard<std::mutex> g(lock_);
    if (ended_) return Error::usage("the VM has ended");
    if (state_ == State::kPaused) return Error::usage("the VM is already paused");
    state_ = State::kPaused;
    update_park_request();
  }
  kick_all_();
  std::unique_lock<std::mutex> lock(lock_);
  changed_.wait(lock, [&] { return all_parked() || ended_; });
  if (ended_) return Error::usage("the VM has ended");
  return {};
}

Status VmLifecycle::resume_by_user() {
  std::lock_guard<std::mutex> g(lock_);
  if (ended_) return Error::usage("the VM has ended");
  if (state_ != State::kPaused) return Error::usage("the VM is not paused");
  state_ = State::kRunning;
  update_park_request();
  changed_.notify_all();
  return {};
}

void VmLifecycle::pause_at_progress() {
  {
    std::lock_guard<std::mutex> g(lock_);
    if (state_ != State::kRunning) return;
    state_ = State::kPaused;
    update_park_request();
  }
  kick_all_();  // the calling vCPU parks at the top of its loop
}

void VmLifecycle::hold_from_start() {
  std::lock_guard<std::mutex> g(lock_);
  ++holds_;
  update_park_request();
}

bool VmLifecycle::hold() {
  {
    std::lock_guard<std::mutex> g(lock_);
    if (ended_) return false;
    ++holds_;
    update_park_request();
  }
  kick_all_();
  std::unique_lock<std::mutex> lock(lock_);
  // Also inside a user's pause: a progress point's pause may still have vCPUs on their way to
  // park().
  changed_.wait(lock, [&] { return all_parked() || ended_; });
  if (!ended_) return true;
  --holds_;
  update_park_request();
  return false;
}

void VmLifecycle::release() {
  std::lock_guard<std::mutex> g(lock_);
  if (holds_ == 0) return;
  --holds_;
  update_park_request();
  changed_.notify_all();
}

void VmLifecycle::on_each_vcpu(const std::function<void(uint32_t index)>& work) {
  std::unique_lock<std::mutex> lock(lock_);
  if (holds_ == 0 || !all_parked()) throw VmmError("on_each_vcpu: the vCPUs are not held");
  if (ended_) throw VmmError("the run ended");
  work_ = &work;
  ++work_generation_;
  work_left_ = vcpus_;
  work_error_.clear();
  changed_.notify_all();
  // A vCPU that left park() because the run ended takes no more work; one already working
  // finishes before this returns (`work` lives on this stack).
  changed_.wait(lock, [&] { return work_left_ == 0 || (ended_ && working_ == 0); });
  work_ = nullptr;
  if (work_left_ != 0) throw VmmError("the run ended");
  if (!work_error_.empty()) throw VmmError(work_error_);
}

void VmLifecycle::park(uint32_t index) {
  std::unique_lock<std::mutex> lock(lock_);
  ++parked_;
  changed_.notify_all();
  for (;;) {
    changed_.wait(lock, [&] {
      return ended_ || !park_requested_.load() ||
             (work_ && done_generation_[index] != work_generation_);
    });
    if (ended_ || !park_requested_.load()) break;
    const uint64_t generation = work_generation_;
    const std::function<void(uint32_t)>& work = *work_;
    ++working_;
    lock.unlock();
    std::string error;
    try {
      work(index);
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    --working_;
    done_generation_[index] = generation;
    if (!error.empty() && work_error_.empty())
      work_error_ = "vCPU " + std::to_string(index) + ": " + error;
    --work_left_;
    changed_.notify_all();
  }
  --parked_;
}

bool VmLifecycle::end(int status) {
  {
    std::lock_guard<std::mutex> g(lock_);
    if (ended_) return false;
    ended_ = true;
    exit_status_ = status;
    if (state_ != State::kHandedOver) state_ = State::kEnded;
    update_park_request();
    changed_.notify_all();
  }
  kick_all_();
  return true;
}

void VmLifecycle::fail(const std::string& reason, int status) {
  {
    std::lock_guard<std::mutex> g(lock_);
    // A failure after the end is kept too (a vCPU thread's error while the run ends).
    if (failure_.empty()) failure_ = reason;
  }
  end(status);
}

void VmLifecycle::interrupt(int sig) {
  {
    std::lock_guard<std::mutex> g(lock_);
    if (failure_.empty()) interrupted_by_ = sig;
  }
  end(128 + sig);
}

Status VmLifecycle::hand_over() {
  {
    std::lock_guard<std::mutex> g(lock_);
    if (ended_) return Error::usage("the VM has ended");
    state_ = State::kHandedOver;
  }
  end(0);
  return {};
}

Status VmLifecycle::shut_down() {
  if (!end(0)) return Error::usage("the VM has ended");
  return {};
}

int VmLifecycle::exit_status() const {
  std::lock_guard<std::mutex> g(lock_);
  return exit_status_;
}

std::string VmLifecycle::failure() const {
  std::lock_guard<std::mutex> g(lock_);
  return failure_;
}

int VmLifecycle::interrupted_by() const {
  std::lock_guard<std::mutex> g(lock_);
  return interrupted_by_;
}

void VmLifecycle::wait_for_end(uint64_t timeout_ns) {
  std::unique_lock<std::mutex> lock(lock_);
  changed_.wait_for(lock, std::chrono::nanoseconds(timeout_ns), [&] { return ended_.load(); });
}

}  // namespace vmm
