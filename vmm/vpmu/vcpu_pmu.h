// One vCPU's virtual PMU (what the LWP proposal's §5.5.2.2 calls the per-vCPU control block; not
// SVM's VMCB): it owns everything PMU-related about one vCPU (the LWP unit with its save area, the
// guest-memory view the models use, the interrupt path) and it is the one place a snapshot or a
// migration reads and writes.
//
// When state is saved and restored on world switches, and why so rarely:
//  * VM exit / VM entry: nothing is saved or restored. The virtual LWP hardware *is* this object
//    in pmuvm's memory, so it survives exits untouched; only the guest-memory view is pointed at
//    the vCPU's current CR3 before the models are called. (A hardware implementation would save
//    on VMRUN/#VMEXIT; a software one gets that for free.)
//  * Guest task switch: the guest kernel does it (SLWPCB flush + LLWPCB of the next task's LWPCB
//    through LWPMSR1, DESIGN §4.4); the model only sees the two MSR accesses.
//  * Snapshot / migration: save_state() serialises the unit's state (LWPMSR0 + the §5.5.2 save
//    area). The unit's generation() tells whether anything changed since the last snapshot, so
//    an incremental snapshot (live-migration rounds) can skip an unchanged vCPU.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "pmu/interrupt_sink.h"
#include "pmu/page_fault_sink.h"
#include "pmu/arch_perfmon/arch_pmu.h"
#include "pmu/lwp/lwp_unit.h"
#include "pmu/netburst/netburst_pmu.h"
#include "vmm/memory/page_walker.h"
#include "vmm/result.h"

namespace vmm {

// What the run loop does with a trapped MSR access.
struct MsrOutcome {
  bool handled = false;  // false: not a PMU MSR this block owns
  bool general_protection = false;
  uint64_t value = 0;  // RDMSR result
};

// The vCPU's registers at the retirement being reported (PEBS records the state after it).
using RegistersNow = std::function<pmu::arch_perfmon::PebsRegisters()>;

class VcpuPmu {
 public:
  // `netburst`, `arch_pmu`: the virtual NetBurst or architectural PMU's configuration when the
  // CPU profile has one (never both: their MSRs overlap, and a profile has one or the other).
  // `registers`: needed by an architectural PMU with PEBS.
  VcpuPmu(uint32_t vcpu_index, uint32_t apic_id, const pmu::lwp::Capabilities& lwp, uint64_t seed,
          GuestRam& ram, pmu::InterruptSink& interrupts,
          std::optional<pmu::netburst::Config> netburst = std::nullopt,
          pmu::PageFaultSink* page_faults = nullptr,
          std::optional<pmu::arch_perfmon::Config> arch_pmu = std::nullopt,
          RegistersNow registers = nullptr);

  uint32_t vcpu_index() const { return vcpu_index_; }
  uint32_t apic_id() const { return apic_id_; }

  // A trapped RDMSR/WRMSR executed at `cpl` with the vCPU's current `cr3`.
  MsrOutcome read_msr(uint32_t msr, uint8_t cpl, uint64_t cr3);
  MsrOutcome write_msr(uint32_t msr, uint64_t value, uint8_t cpl, uint64_t cr3);

  // The vCPU is about to run at CPL 3 with `cr3` (PV user-entry notification or a stepper).
  void enter_user(uint64_t cr3);
  // One retired instruction from a counting backend, with the vCPU's current `cr3`.
  void retire(const pmu::RetiredInstruction& insn, uint64_t cr3);
  // The host backend (DESIGN §4.11): how many CPL-3 instructions both models let retire unseen
  // now, and such a batch once it retired (pmu/unseen_retirements.h).
  pmu::UnseenAllowance unseen_allowance() const;
  void retire_unseen(const pmu::UnseenRetirements& batch);

  // Whether the cache model must see the accesses of the instructions reported now: LWP's DCache
  // misses, or any NetBurst counting (its cycles, and so global_power_events and threshold
  // filters, include miss latencies).
  // Whether an enabled event reads the stepper's cache model (misses, cycles) or its branch
  // predictor (prediction bits) now (StepAccountant::ModelDemand).
  bool uses_cache_model() const {
    return lwp_.counts_cache_misses() || (netburst_ && netburst_->reads_cache_model()) ||
           (arch_pmu_ && arch_pmu_->reads_cache_model());
  }
  bool uses_branch_predictor() const {
    return lwp_.reads_branch_predictions() ||
           (netburst_ && netburst_->reads_branch_predictions()) ||
           (arch_pmu_ && arch_pmu_->reads_branch_predictions());
  }
  // Whether some model counts now (the backend must report user instructions), and whether
  // one counts kernel instructions too.
  bool wants_events() const {
    return lwp_.wants_events() || (netburst_ && netburst_->wants_events()) ||
           (arch_pmu_ && arch_pmu_->wants_events());
  }
  bool wants_kernel_events() const {
    return (netburst_ && netburst_->wants_kernel_events()) ||
           (arch_pmu_ && arch_pmu_->wants_kernel_events());
  }
  // How many instructions may retire before they are reported with nothing any model shows
  // (a record, an overflow) before the last of them: the smallest of the models' answers.
  uint64_t quiet_retirements() const;

  // The LWP unit's state (pmu/lwp/save_area.h: LWPMSR0 + the §5.5.2 save area).
  std::vector<std::byte> save_state() const;
  Status restore_state(std::span<const std::byte> bytes);
  // The NetBurst PMU's state in its own versioned format (pmu/netburst/save_state.h); nullopt
  // when the profile has no NetBurst PMU. restore: `bytes` null when the snapshot has none; a
  // one-line error when it does not fit this block (state without a PMU, a PMU without state).
  std::optional<std::vector<std::byte>> save_netburst_state() const;
  Status restore_netburst_state(const std::vector<std::byte>* bytes);
  // The architectural PMU's state (pmu/arch_perfmon/arch_pmu.h); nullopt without one. restore:
  // `state` null when the snapshot has none; a one-line error when it does not fit this block.
  std::optional<pmu::arch_perfmon::ArchPmuState> arch_pmu_state() const;
  Status restore_arch_pmu_state(const pmu::arch_perfmon::ArchPmuState* state);
  uint64_t generation() const { return lwp_.generation(); }

  pmu::lwp::LwpUnit& lwp() { return lwp_; }
  pmu::netburst::NetburstPmu* netburst() { return netburst_ ? &*netburst_ : nullptr; }
  pmu::arch_perfmon::ArchPmu* arch_pmu() { return arch_pmu_ ? &*arch_pmu_ : nullptr; }

 private:
  // PEBS's view of the vCPU: the kernel's memory (the DS area) and the registers now.
  class PebsView : public pmu::arch_perfmon::PebsMachine {
   public:
    PebsView(GuestRam& ram, RegistersNow registers)
        : memory_(ram, PagedGuestMemory::Access::kSupervisor), registers_(std::move(registers)) {}
    pmu::GuestMemory& supervisor_memory() override { return memory_; }
    pmu::arch_perfmon::PebsRegisters registers_after() override { return registers_(); }
    void set_cr3(uint64_t cr3) { memory_.set_cr3(cr3); }
    bool has_registers() const { return static_cast<bool>(registers_); }

   private:
    PagedGuestMemory memory_;
    RegistersNow registers_;
  };

  uint32_t vcpu_index_;
  uint32_t apic_id_;
  PagedGuestMemory memory_;
  PebsView pebs_view_;
  pmu::lwp::LwpUnit lwp_;
  std::optional<pmu::netburst::NetburstPmu> netburst_;
  std::optional<pmu::arch_perfmon::ArchPmu> arch_pmu_;
};

}  // namespace vmm
