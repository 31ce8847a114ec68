// The guest's console: what it prints through COM1 or the block console port goes to stdout,
// flushed per line, and each completed line is looked at for a --pause-on-output point and for
// the guest kind's panic line (a Linux panic ends the run). Shared by the devices that print and
// called from any vCPU thread: it has its own lock.
#pragma once

#include <cstdio>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "vmm/devices/io_bus.h"
#include "vmm/progress_pauses.h"
#include "vmm/result.h"

namespace vmm {

class GuestConsole {
 public:
  // What is kept of a console line (its start): no more, and no newline, which ends a line.
  static constexpr size_t kLineLimit = 4096;
  // Why a completed line ends the run (a Linux panic's last line), or nullopt.
  using PanicRule = std::function<std::optional<std::string>(std::string_view line)>;

  GuestConsole(ProgressPauses& progress, PanicRule panic, std::FILE* out = stdout)
      : progress_(progress), panic_(std::move(panic)), out_(out) {}

  // Prints `text`; returns what a line it completed asks for (a pause, a failure), else kNone.
  RunEffect print(std::string_view text);
  // Called before any text is printed (under the console's lock): a progress line on the same
  // terminal takes itself off first (vmm/progress_line.h).
  void set_before_output(std::function<void()> hook) { before_output_ = std::move(hook); }

  // Everything printed so far is in the output file (a pause, before a snapshot).
  void flush();

  // Snapshot / migration: the line printed so far (devices.console).
  std::string line() const;
  Status restore_line(std::string line);

 private:
  void end_line(RunEffect& effect);

  mutable std::mutex lock_;
  ProgressPauses& progress_;
  PanicRule panic_;
  std::FILE* out_;
  std::function<void()> before_output_;
  std::string line_;
};

}  // namespace vmm
