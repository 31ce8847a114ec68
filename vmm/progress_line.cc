#include "vmm/progress_line.h"

#include <unistd.h>

#include <cinttypes>

namespace vmm {
namespace {

// 1234567 -> "1 234 567": long counts stay readable at a glance.
std::string grouped(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) out += ' ';
    out += digits[i];
  }
  return out;
}

}  // namespace

ProgressLine::ProgressLine(std::FILE* out, bool force, bool quiet)
    : out_(out), enabled_(!quiet && (force || isatty(fileno(out)))) {}

std::string ProgressLine::text(double seconds, const Figures& now, double exits_per_second) {
  char time[32];
  std::snprintf(time, sizeof time, "%.0f s", seconds);
  return std::string("pmuvm: ") + time + ", " + grouped(now.counted) + " instructions counted, " +
         grouped(now.records) + " LWP records, " +
         grouped(static_cast<uint64_t>(exits_per_second + 0.5)) + " exits/s";
}

void ProgressLine::update(uint64_t now_ns, const Figures& figures) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> g(lock_);
  if (started_ns_ == 0) {
    started_ns_ = last_ns_ = now_ns;
    last_exits_ = figures.exits;
    return;
  }
  if (now_ns - last_ns_ < 1'000'000'000) return;
  const double rate = (figures.exits - last_exits_) * 1e9 / static_cast<double>(now_ns - last_ns_);
  last_ns_ = now_ns;
  last_exits_ = figures.exits;
  // Carriage return, the line, erase to its end: the cursor stays at its end until erase().
  std::fprintf(out_, "\r%s\x1b[K", text((now_ns - started_ns_) / 1e9, figures, rate).c_str());
  std::fflush(out_);
  shown_ = true;
}

void ProgressLine::erase() {
  if (!enabled_) return;
  std::lock_guard<std::mutex> g(lock_);
  if (!shown_) return;
  std::fputs("\r\x1b[K", out_);
  std::fflush(out_);
  shown_ = false;
}

}  // namespace vmm
