// Points in a guest's progress at which the VM pauses itself, as vm.pause would (vm.resume
// continues it): `run --pause-on-output TEXT` (right after the guest's console prints a line
// containing TEXT) and `--pause-at-instructions N` (once the precise backend has counted N
// instructions, every vCPU's together: the figure vm.pmu and the run's closing lines report;
// a resumed VM's count goes on from its snapshot's). Wall time and host speed play no part, so
// a snapshot or a migration lands at the same place of the guest's run every time: tests and
// scripts synchronise on what the guest did, never on how long it took.
//
// Each point pauses once. Thread-safe: console lines come from whichever vCPU wrote them,
// counted instructions from every vCPU thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vmm {

class ProgressPauses {
 public:
  ProgressPauses() = default;
  ProgressPauses(std::vector<std::string> on_output, std::optional<uint64_t> at_instructions);

  // The guest's console completed `line` (without its newline): why the VM pauses now, when
  // the line contains a text still waiting (the first one given, if several do).
  std::optional<std::string> on_console_line(std::string_view line);

  // The counted instructions so far, all vCPUs: set once when a VM resumes from a snapshot.
  void set_counted(uint64_t total) { counted_ = total; }
  // One more counted instruction: why the VM pauses now, when it reaches the point.
  std::optional<std::string> on_counted_instruction() {
    const uint64_t total = ++counted_;
    if (!at_instructions_armed_.load(std::memory_order_relaxed)) return std::nullopt;
    return reached(total);
  }
  // Several at once (the host backend's batches of unseen instructions).
  std::optional<std::string> on_counted_instructions(uint64_t n) {
    if (n == 0) return std::nullopt;
    const uint64_t total = counted_ += n;
    if (!at_instructions_armed_.load(std::memory_order_relaxed)) return std::nullopt;
    return reached(total);
  }
  uint64_t counted() const { return counted_; }
  // Instructions still to count up to the --pause-at-instructions point while it is armed (a
  // block stepper ends a block there), else nullopt. At least 1.
  std::optional<uint64_t> instructions_to_pause() const {
    if (!at_instructions_armed_.load(std::memory_order_relaxed)) return std::nullopt;
    const uint64_t counted = counted_.load(std::memory_order_relaxed);
    return at_instructions_ > counted ? at_instructions_ - counted : 1;
  }

 private:
  std::optional<std::string> reached(uint64_t total);

  std::mutex lock_;
  std::vector<std::string> on_output_;  // texts still waiting, in the order given
  uint64_t at_instructions_ = 0;
  std::atomic<bool> at_instructions_armed_{false};
  std::atomic<uint64_t> counted_{0};
};

}  // namespace vmm
