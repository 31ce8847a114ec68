// The human-readable LWP profile `pmuvm run --lwp-report` prints at exit: per task and event,
// the hottest instruction addresses with their record counts, share and a bar, plus missed
// events and threshold interrupts (as LWP raised them; those the rate limiter coalesced are
// named, so the guest's count is interrupts - coalesced). Records and interrupts are attributed
// to tasks by the VMM (the task whose LWPCB stored them / raised them).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "pmu/lwp/event_record.h"
#include "pmu/state_archive.h"

namespace vmm {

class LwpReport {
 public:
  // The guest chooses task numbers (PMUVM_MSR_TASK), address spaces and record addresses: the
  // report keeps at most kMaxTasks tasks (later ones are counted together as kOtherTasks) and
  // kMaxPlacedAddresses addresses over all its tasks and events (records at further ones are
  // counted per event, not placed), so a guest cannot grow the VMM's memory without bound: about
  // 20 MiB at most, and a state of about 5 MiB (within a migration frame).
  static constexpr size_t kMaxTasks = 4096;
  static constexpr size_t kMaxPlacedAddresses = size_t{1} << 18;
  static constexpr uint32_t kOtherTasks = 0xFFFFFFFF;
  // Its archive's element budget (pmu::ElementBudget): the tasks, their events (LWP records
  // carry three event IDs, pmu/lwp/architecture.h; 7 leaves room), and the placed addresses.
  static constexpr uint64_t kMaxArchivedElements = (kMaxTasks + 1) * 8 + kMaxPlacedAddresses;

  void set_task_name(uint32_t task, std::string name) { stats_of(task).name = std::move(name); }
  // The name set for `task` ("" when none).
  std::string task_name(uint32_t task) const {
    auto it = tasks_.find(task);
    return it == tasks_.end() ? std::string() : it->second.name;
  }
  void add_record(uint32_t task, const pmu::lwp::EventRecordBytes& record, bool missed);
  // A threshold interrupt the task's LWP raised; `coalesced`: the rate limiter folded it into one
  // it already held (--max-interrupt-rate), so the guest never receives it on its own.
  void add_interrupt(uint32_t task, bool coalesced = false) {
    TaskStats& t = stats_of(task);
    ++t.interrupts;
    if (coalesced) ++t.coalesced;
  }

  // What an address of a task's code is (its function, file and line: code_places.h), or nullopt.
  using PlaceOf = std::function<std::optional<std::string>(uint32_t task, uint64_t address)>;
  // `top` addresses per event; bars are `bar_width` characters for the hottest address; each
  // address followed by its place where `place_of` knows one.
  std::string render(int top = 10, int bar_width = 30, const PlaceOf& place_of = {}) const;
  size_t placed_addresses() const { return placed_; }
  // Records taken since boot, all tasks.
  uint64_t records() const {
    uint64_t n = 0;
    for (const auto& [id, t] : tasks_)
      for (const auto& [event, e] : t.events) n += e.records;
    return n;
  }

  // Snapshot / migration: a restored run reports everything since boot.
  // The version of what archive() saves: bump it with any change to that (snapshot sections,
  // vmm/snapshot/state_sections.h).
  static constexpr uint16_t kStateVersion = 1;
  template <class Archive>
  void archive(Archive& a) {
    a(tasks_);
    if constexpr (Archive::kLoading) {
      if (tasks_.size() > kMaxTasks + 1)
        throw pmu::StateFormatError("LWP report: " + std::to_string(tasks_.size()) + " tasks");
      placed_ = 0;
      for (const auto& [id, t] : tasks_) {
        check_loaded(id, t);
        for (const auto& [event, e] : t.events) placed_ += e.by_rip.size();
      }
      if (placed_ > kMaxPlacedAddresses)
        throw pmu::StateFormatError("LWP report: " + std::to_string(placed_) +
                                    " addresses placed (at most " +
                                    std::to_string(kMaxPlacedAddresses) + ")");
    }
  }

 private:
  struct EventStats {
    uint64_t records = 0;
    std::map<uint64_t, uint64_t> by_rip;
    uint64_t untracked = 0;  // records at addresses the report had no room left for
    template <class Archive>
    void archive(Archive& a) {
      a(records, by_rip, untracked);
    }
  };
  struct TaskStats {
    std::string name;
    std::map<uint8_t, EventStats> events;
    uint64_t missed = 0;
    uint64_t interrupts = 0;  // raised by the task's LWP
    uint64_t coalesced = 0;  // of those, folded into a held one: delivered = interrupts - coalesced
    template <class Archive>
    void archive(Archive& a) {
      a(name, events, missed, interrupts, coalesced);
    }
  };
  TaskStats& stats_of(uint32_t task);
  // A loaded task holds only what add_record and add_interrupt make (StateFormatError if not):
  // every placed address with a record, each event's records = placed + not placed, coalesced
  // interrupts among those raised.
  static void check_loaded(uint32_t id, const TaskStats& t);

  std::map<uint32_t, TaskStats> tasks_;
  size_t placed_ = 0;  // addresses in all by_rip maps: at most kMaxPlacedAddresses
};

std::string event_name(uint8_t event_id);

}  // namespace vmm
