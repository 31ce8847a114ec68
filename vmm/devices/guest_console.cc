#include "vmm/devices/guest_console.h"

namespace vmm {

RunEffect GuestConsole::print(std::string_view text) {
  RunEffect effect;
  std::lock_guard<std::mutex> g(lock_);
  if (before_output_ && !text.empty()) before_output_();
  for (char c : text) {
    std::fputc(c, out_);
    if (c == '\n') {
      end_line(effect);
    } else if (line_.size() < kLineLimit) {
      line_.push_back(c);
    }
  }
  return effect;
}

void GuestConsole::end_line(RunEffect& effect) {
  std::fflush(out_);
  if (auto reason = progress_.on_console_line(line_)) effect.merge(RunEffect::pause(*reason));
  if (panic_)
    if (auto reason = panic_(line_)) effect.merge(RunEffect::fail(*reason));
  line_.clear();
}

void GuestConsole::flush() {
  std::lock_guard<std::mutex> g(lock_);
  std::fflush(out_);
}

std::string GuestConsole::line() const {
  std::lock_guard<std::mutex> g(lock_);
  return line_;
}

Status GuestConsole::restore_line(std::string line) {
  if (line.size() > kLineLimit || line.find('\n') != std::string::npos)
    return Error::usage("the snapshot's devices.console state is not one console line of at most " +
                        std::to_string(kLineLimit) + " bytes");
  std::lock_guard<std::mutex> g(lock_);
  line_ = std::move(line);
  return {};
}

}  // namespace vmm
