#include "vmm/progress_pauses.h"

#include <algorithm>

namespace vmm {

ProgressPauses::ProgressPauses(std::vector<std::string> on_output,
                               std::optional<uint64_t> at_instructions)
    : on_output_(std::move(on_output)) {
  if (at_instructions) {
    at_instructions_ = *at_instructions;
    at_instructions_armed_ = true;
  }
}

std::optional<std::string> ProgressPauses::on_console_line(std::string_view line) {
  std::lock_guard<std::mutex> g(lock_);
  const auto hit = std::find_if(on_output_.begin(), on_output_.end(), [&](const std::string& t) {
    return line.find(t) != std::string_view::npos;
  });
  if (hit == on_output_.end()) return std::nullopt;
  std::string reason = "the guest printed a line containing \"" + *hit + "\" (--pause-on-output)";
  on_output_.erase(hit);
  return reason;
}

std::optional<std::string> ProgressPauses::reached(uint64_t total) {
  if (total < at_instructions_) return std::nullopt;
  // Only one vCPU thread wins the point.
  bool armed = true;
  if (!at_instructions_armed_.compare_exchange_strong(armed, false)) return std::nullopt;
  return std::to_string(total) + " instructions counted (--pause-at-instructions " +
         std::to_string(at_instructions_) + ")";
}

}  // namespace vmm
