// The run's LWP records as a perf.data file (`pmuvm run --perf-data FILE`), in the format of
// Linux's tools/perf/Documentation/perf.data-file-format.txt, so that Debian's `perf report -i
// FILE`, `perf script` and `perf annotate` read it as if perf had sampled the guest program:
//
//  * one attribute (event) per LWP event: instructions retired as PERF_COUNT_HW_INSTRUCTIONS,
//    branches retired as PERF_COUNT_HW_BRANCH_INSTRUCTIONS, DCache misses as the L1D read-miss
//    cache event; each sample's period is the event's interval in the LWPCB when it was stored;
//  * per guest task, a COMM record with its name and an MMAP record per executable segment of its
//    ELF (the address ranges perf resolves symbols in: the file is read by perf, at its path);
//  * per LWP record, a SAMPLE with IP (the record's RIP), PID/TID (the task), TIME (the record's
//    sequence number: deterministic, in order), CPU (the vCPU), PERIOD, ADDR (a branch's target, a
//    DCache miss's data address), WEIGHT (a miss's latency in cycles) and, for branches, a
//    one-entry branch stack {from, to, predicted/mispredicted} (`perf report -b`);
//  * per PMI of a NetBurst or architectural PMU, a SAMPLE of a raw event (ADDR: the counter that
//    overflowed; for the architectural PMU its GLOBAL_STATUS bit: x for PMCx, 32 + i for fixed
//    counter i, 62 for the PEBS buffer) at the instruction whose retirement raised it, period 1.
//
// Samples are written as records arrive; the header and attributes when the run ends (finish()).
// A file without them (pmuvm killed) is incomplete, as a perf.data is when perf is.
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "pmu/lwp/event_record.h"
#include "vmm/boot/elf_image.h"

namespace vmm {

class PerfDataFile {
 public:
  // What a task is, for its COMM and MMAP records: its name, and the ELF its user code runs from
  // (path empty: none known; its samples then show bare addresses).
  struct Task {
    std::string name;
    std::string elf_path;
    std::vector<ElfSegment> segments;  // the ELF's PT_LOAD segments
  };
  using TaskOf = std::function<Task(uint32_t task)>;

  // Creates `path` (replacing a file there). UsageError when it cannot be written.
  PerfDataFile(const std::string& path, TaskOf task_of);
  ~PerfDataFile();
  PerfDataFile(const PerfDataFile&) = delete;
  PerfDataFile& operator=(const PerfDataFile&) = delete;

  // One stored LWP record of `task` on `vcpu`; `period`: its event's interval (0 when unknown:
  // 1 is written). Records of other event IDs than the three LWP defines are left out.
  void add_record(uint32_t task, uint32_t vcpu, const pmu::lwp::EventRecordBytes& record,
                  uint64_t period);
  // One PMI of `task` on `vcpu`: raised by `counter` at the retirement of the instruction
  // at `rip` (at `cpl`; rip 0: unknown, a batch the host backend counted). A sample of a fourth
  // event, raw config = the counter's number, written only when a run has PMIs.
  void add_pmi(uint32_t task, uint32_t vcpu, int counter, uint64_t rip, uint8_t cpl);
  // Writes the attributes and the header; the file is complete. Idempotent.
  void finish();

  uint64_t samples() const { return samples_; }

 private:
  void announce(uint32_t task);  // COMM and MMAP records, once per task
  void write(const std::vector<std::byte>& bytes);

  std::string path_;
  TaskOf task_of_;
  std::ofstream out_;
  uint64_t data_size_ = 0;
  uint64_t samples_ = 0;
  bool pmis_ = false;  // a PMI sample was written: the file has the fourth event
  std::set<uint32_t> announced_;
  bool finished_ = false;
};

}  // namespace vmm
