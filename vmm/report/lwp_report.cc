#include "vmm/report/lwp_report.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

namespace vmm {

std::string event_name(uint8_t event_id) {
  switch (event_id) {
    case 1: return "instructions retired";
    case 2: return "branches retired";
    case 3: return "DCache misses";
    default: return "event " + std::to_string(event_id);
  }
}

LwpReport::TaskStats& LwpReport::stats_of(uint32_t task) {
  if (auto it = tasks_.find(task); it != tasks_.end()) return it->second;
  if (tasks_.size() < kMaxTasks && task != kOtherTasks) return tasks_[task];
  TaskStats& other = tasks_[kOtherTasks];
  if (other.name.empty())
    other.name = "(tasks beyond the first " + std::to_string(kMaxTasks) + ", together)";
  return other;
}

void LwpReport::add_record(uint32_t task, const pmu::lwp::EventRecordBytes& record, bool missed) {
  TaskStats& t = stats_of(task);
  if (missed) ++t.missed;  // the record itself was stored (it overwrote the last one)
  const pmu::lwp::DecodedRecord d = pmu::lwp::decode_record(record);
  EventStats& e = t.events[d.event_id];
  ++e.records;
  if (auto it = e.by_rip.find(d.rip); it != e.by_rip.end())
    ++it->second;
  else if (placed_ < kMaxPlacedAddresses)
    e.by_rip.emplace(d.rip, 1), ++placed_;
  else
    ++e.untracked;
}

std::string LwpReport::render(int top, int bar_width, const PlaceOf& place_of) const {
  std::string out;
  char line[256];
  if (tasks_.empty()) return "LWP report: no task stored any record\n";
  for (const auto& [id, t] : tasks_) {
    std::snprintf(line, sizeof line,
                  "== task %u%s%s: %" PRIu64 " missed events, %" PRIu64 " threshold interrupts", id,
                  t.name.empty() ? "" : " ", t.name.c_str(), t.missed, t.interrupts);
    out += line;
    if (t.coalesced != 0) {
      std::snprintf(line, sizeof line, " (%" PRIu64 " coalesced by --max-interrupt-rate)",
                    t.coalesced);
      out += line;
    }
    out += "\n";
    if (t.events.empty()) out += "   (no records)\n";
    for (const auto& [event, e] : t.events) {
      std::snprintf(line, sizeof line, "   %s: %" PRIu64 " records\n", event_name(event).c_str(),
                    e.records);
      out += line;
      std::vector<std::pair<uint64_t, uint64_t>> hot(e.by_rip.begin(), e.by_rip.end());
      // Most records first; equal counts by address so the output is deterministic.
      std::sort(hot.begin(), hot.end(), [](const auto& a, const auto& b) {
        return a.second != b.second ? a.second > b.second : a.first < b.first;
      });
      if (hot.size() > static_cast<size_t>(top)) hot.resize(top);
      const uint64_t hottest = hot.empty() ? 1 : hot.front().second;
      for (const auto& [rip, count] : hot) {
        const int bar = static_cast<int>((count * bar_width + hottest / 2) / hottest);
        std::snprintf(line, sizeof line, "     %#018" PRIx64 " %8" PRIu64 " %6.2f%% %s", rip, count,
                      100.0 * count / e.records, std::string(std::max(bar, 1), '#').c_str());
        out += line;
        // The place after a full-width bar's column, so places line up.
        if (const std::optional<std::string> place = place_of ? place_of(id, rip) : std::nullopt)
          out += std::string(std::max(bar_width - std::max(bar, 1), 0) + 2, ' ') + *place;
        out += "\n";
      }
      if (e.untracked != 0) {
        std::snprintf(line, sizeof line,
                      "     (%" PRIu64
                      " records at addresses beyond the report's %zu, not placed)\n",
                      e.untracked, kMaxPlacedAddresses);
        out += line;
      }
    }
  }
  return out;
}

}  // namespace vmm
