// The per-vCPU bookkeeping a snapshot carries beside the models' own state (section vcpuN.counts):
// instructions counted, the guest task running, a PMI waiting for the guest to take it, and the
// LWP #PF traps delivered or dropped. A vCPU's runner keeps these in several places and saves
// them through this one struct, so the format has one definition that a test can reach
// (tests/snapshot/golden_state_test.cc).
#pragma once

#include <cstdint>

namespace vmm {

struct VcpuCounts {
  uint64_t counted = 0;
  uint32_t task = 0;
  bool pmi_pending = false;
  uint64_t page_faults_delivered = 0;
  uint64_t page_faults_dropped = 0;

  // The version of what archive() saves: bump it with any change to that (state_sections.h).
  static constexpr uint16_t kStateVersion = 1;
  template <class Archive>
  void archive(Archive& a) {
    a(counted, task, pmi_pending, page_faults_delivered, page_faults_dropped);
  }
};

}  // namespace vmm
