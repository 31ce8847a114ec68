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

void LwpReport::check_loaded(uint32_t id, const TaskStats& t) {
  const std::string task = "LWP report: task " + std::to_string(id);
  if (t.coalesced > t.interrupts)
    throw pmu::StateFormatError(task + ": " + std::to_string(t.coalesced) + " coalesced of " +
                                std::to_string(t.interrupts) + " threshold interrupts");
  for (const auto& [event, e] : t.events) {
    const std::string where = task + " event " + std::to_string(event) + ": ";
    uint64_t placed = 0;
    for (const auto& [rip, count] : e.by_rip) {
      if (count == 0) throw pmu::StateFormatError(where + "an address with no records");
      if (count > e.records - placed)
        throw pmu::StateFormatError(where + std::to_string(e.records) +
                                    " records, but more placed");
      placed += count;
    }
    if (e.records - placed != e.untracked)
      throw pmu::StateFormatError(where + std::to_string(e.records) + " records, but " +
                                  std::to_string(placed) + " placed and " +
                                  std::to_string(e.untracked) + " not placed");
  }
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
        // Rounded to the nearest character, in 128 bits: counts can be any 64-bit value.
        const unsigned __int128 scaled =
            (static_cast<unsigned __int128>(count) * static_cast<unsigned>(std::max(bar_width, 0)) +
             hottest / 2) /
            hottest;
        const int bar =
            static_cast<int>(std::min<unsigned __int128>(scaled, std::max(bar_width, 1)));
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
