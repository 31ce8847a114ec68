// One KVM virtual machine: its memory slot, the in-kernel irqchip (LAPIC per vCPU, as DESIGN §3
// measured: KVM_NMI and KVM_SIGNAL_MSI reach the guest), user-space MSR exits, and the MSR filter
// that routes the PMU MSRs to pmuvm while every other MSR keeps KVM's behaviour.
#pragma once

#include <cstdint>
#include <vector>

#include "vmm/kvm/kvm_state.h"
#include "vmm/kvm/kvm_system.h"
#include "vmm/memory/guest_ram.h"

namespace vmm {

struct MsrRange {
  uint32_t base = 0;
  uint32_t count = 0;
};

class KvmVm {
 public:
  KvmVm(KvmSystem& kvm, GuestRam& ram);
  ~KvmVm();
  KvmVm(const KvmVm&) = delete;
  KvmVm& operator=(const KvmVm&) = delete;

  int fd() const { return fd_; }
  KvmSystem& system() { return kvm_; }

  // RDMSR/WRMSR of any MSR in `trapped` exits to user space (KVM_EXIT_X86_RDMSR/WRMSR).
  // Can be called again after vCPUs ran (DESIGN §3).
  void set_msr_filter(const std::vector<MsrRange>& trapped);

  // Switches KVM's vPMU off for this VM (KVM_CAP_PMU_CAPABILITY, KVM_PMU_CAP_DISABLE), before any
  // vCPU exists: a guest whose CPU profile has no PMU of its own cannot reach the host's
  // counters through the AMD or Intel PMU MSRs KVM would emulate. False when this KVM has no
  // vPMU to switch off (no host PMU, enable_pmu off, or a kernel before 5.19).
  bool disable_vpmu();

  // The in-kernel i8254 PIT (ports 0x40-0x43, and 0x61 for channel 2's gate and output, which
  // Linux's TSC calibration reads), injecting on GSI 0. Needs the in-kernel irqchip.
  void create_pit();
  // Level of an ISA interrupt line (GSI) of the in-kernel PIC/IOAPIC, e.g. IRQ4 for COM1.
  void set_irq_line(uint32_t gsi, bool level);

  // A fixed-vector interrupt to the vCPU with this APIC ID, through the in-kernel LAPIC.
  void signal_msi(uint32_t apic_id, uint8_t vector);

  // Snapshot / migration of the in-kernel devices (kvm_state.h), while every vCPU is parked.
  VmArchState save_state(bool has_pit) const;
  void restore_state(const VmArchState& state);

  // Live migration's pre-copy: KVM_MEM_LOG_DIRTY_PAGES on every RAM slot, and the pages the guest
  // wrote since the last call (KVM_GET_DIRTY_LOG resets the log), as guest-physical page numbers.
  void set_dirty_logging(bool enabled);
  std::vector<uint64_t> take_dirty_pages();

 private:
  void set_memory_slots(uint32_t flags);

  KvmSystem& kvm_;
  GuestRam& ram_;
  int fd_ = -1;
};

}  // namespace vmm
