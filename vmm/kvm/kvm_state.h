// Everything KVM holds of a VM and its vCPUs that a snapshot or a migration must carry: the
// architectural vCPU state (registers, FPU/SSE/AVX through XSAVE, XCR0, MSRs, local APIC, pending
// events, run state, debug registers) and the in-kernel devices (PIC pair, IOAPIC, PIT, clock).
// Captured with the KVM_GET_* ioctls while the vCPUs are parked between KVM_RUNs, restored with
// the KVM_SET_* ones in the order QEMU uses (it matters: the LAPIC after the APIC base in SREGS,
// vCPU events after the LAPIC).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "pmu/state_archive.h"
#include "vmm/kvm/kvm_abi.h"

namespace vmm {

struct MsrValue {
  uint32_t index = 0;
  uint64_t value = 0;
  template <class Archive>
  void archive(Archive& a) {
    a(index, value);
  }
};

struct VcpuArchState {
  kvm_regs regs{};
  kvm_sregs sregs{};
  kvm_xsave xsave{};
  kvm_xcrs xcrs{};
  kvm_lapic_state lapic{};
  kvm_vcpu_events events{};
  kvm_mp_state mp_state{};
  kvm_debugregs debugregs{};
  std::vector<MsrValue> msrs;  // every MSR KVM lists as one to save (KVM_GET_MSR_INDEX_LIST)
  // KVM's list holds a few hundred; a state with more is not one pmuvm wrote (pmu::ElementBudget:
  // refused before the list is allocated).
  static constexpr uint64_t kMaxArchivedElements = 4096;

  // The version of what archive() saves: bump it with any change to that (snapshot sections,
  // vmm/snapshot/state_sections.h).
  static constexpr uint16_t kStateVersion = 1;
  template <class Archive>
  void archive(Archive& a) {
    a(pmu::raw_bytes(regs), pmu::raw_bytes(sregs), pmu::raw_bytes(xsave), pmu::raw_bytes(xcrs),
      pmu::raw_bytes(lapic), pmu::raw_bytes(events), pmu::raw_bytes(mp_state),
      pmu::raw_bytes(debugregs), msrs);
  }
};

struct VmArchState {
  kvm_irqchip pic_master{};
  kvm_irqchip pic_slave{};
  kvm_irqchip ioapic{};
  std::optional<kvm_pit_state2> pit;  // only VMs that have one (Linux guests)
  kvm_clock_data clock{};

  // The version of what archive() saves: bump it with any change to that (snapshot sections,
  // vmm/snapshot/state_sections.h).
  static constexpr uint16_t kStateVersion = 1;
  template <class Archive>
  void archive(Archive& a) {
    a(pmu::raw_bytes(pic_master), pmu::raw_bytes(pic_slave), pmu::raw_bytes(ioapic));
    bool has_pit = pit.has_value();
    a(has_pit);
    if (has_pit) {
      if (!pit) pit.emplace();
      a(pmu::raw_bytes(*pit));
    }
    a(pmu::raw_bytes(clock));
  }
};

}  // namespace vmm
