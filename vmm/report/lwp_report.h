// The human-readable LWP profile `pmuvm run --lwp-report` prints at exit: per task and event,
// the hottest instruction addresses with their record counts, share and a bar, plus missed
// events and threshold interrupts (as LWP raised them; those the rate limiter coalesced are
// named, so the guest's count is interrupts - coalesced). Records and interrupts are attributed
// to tasks by the VMM (the task whose LWPCB stored them / raised them).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "pmu/lwp/event_record.h"

namespace vmm {

class LwpReport {
 public:
  void set_task_name(uint32_t task, std::string name) { tasks_[task].name = std::move(name); }
  void add_record(uint32_t task, const pmu::lwp::EventRecordBytes& record, bool missed);
  // A threshold interrupt the task's LWP raised; `coalesced`: the rate limiter folded it into one
  // it already held (--max-interrupt-rate), so the guest never receives it on its own.
  void add_interrupt(uint32_t task, bool coalesced = false) {
    ++tasks_[task].interrupts;
    if (coalesced) ++tasks_[task].coalesced;
  }

  // `top` addresses per event; bars are `bar_width` characters for the hottest address.
  std::string render(int top = 10, int bar_width = 30) const;

  // Snapshot / migration: a restored run reports everything since boot.
  template <class Archive>
  void archive(Archive& a) {
    a(tasks_);
  }

 private:
  struct EventStats {
    uint64_t records = 0;
    std::map<uint64_t, uint64_t> by_rip;
    template <class Archive>
    void archive(Archive& a) {
      a(records, by_rip);
    }
  };
  struct TaskStats {
    std::string name;
    std::map<uint8_t, EventStats> events;
    uint64_t missed = 0;
    uint64_t interrupts = 0;  // raised by the task's LWP
    uint64_t coalesced = 0;   // of those, folded into a held one: delivered = interrupts - coalesced
    template <class Archive>
    void archive(Archive& a) {
      a(name, events, missed, interrupts, coalesced);
    }
  };
  std::map<uint32_t, TaskStats> tasks_;
};

std::string event_name(uint8_t event_id);

}  // namespace vmm
