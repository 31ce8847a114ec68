// A vCPU's exits: the exit handler (vmm/machine/exit_handler.h) decides from the kvm_run page;
// this file gives it the vCPU (its MSRs: the PMU models and pmuvm's paravirtual MSRs; its
// counting backend; its registers) and acts on what it returns.
#include <spdlog/spdlog.h>

#include <optional>
#include <string>

#include "guest/abi/pmuvm_abi.h"
#include "vmm/machine/exit_handler.h"
#include "vmm/machine/vcpu_runner.h"

namespace vmm {
namespace {

constexpr uint32_t kMsrLwpcbAddress = 0xC0000106;  // LWPMSR1
// DEBUGCTL's defined bits (SDM vol. 4): LBR, BTF, TR, BTS, BTINT, BTS_OFF_OS, BTS_OFF_USR, the
// freeze bits, ENABLE_UNCORE_PMI, FREEZE_WHILE_SMM, RTM_DEBUG. Any other: #GP.
constexpr uint64_t kDebugctlDefined = 0x3 | (0x3FFull << 6);
constexpr uint64_t kDebugctlLbrAndBtf = 0x3;

}  // namespace

// CPL is SS.DPL (architecturally equal to it; AMD keeps CPL there, and KVM's SVM code reports it
// so). A selector's RPL is what the guest loaded, not the privilege level.
bool VcpuRunner::write_msr(uint32_t msr, uint64_t value) {
  // Under pmuvm's architectural PMU (the only time DEBUGCTL is trapped) its freeze bits are the
  // model's, and LBR too where the model has last-branch records (ArchPmu::debugctl_bits());
  // else LBR and BTF go to KVM as before (which ignores them without LBR virtualization);
  // the other defined bits (BTS, uncore PMI, FREEZE_WHILE_SMM: no SMM here) are accepted and
  // read back as 0. Only LBR and BTF go to KVM: bits 6 and up are reserved on an AMD host,
  // where KVM with LBR virtualization refuses them. Where KVM refuses LBR or BTF (an Intel host
  // without LBR for the guest), the write is the #GP KVM would have given; nothing changes.
  if (pmu::arch_perfmon::ArchPmu* ap = pmu_->arch_pmu(); ap && msr == kMsrDebugctl) {
    if (value & ~kDebugctlDefined) return false;
    if (!kvm_->try_set_msr(kMsrDebugctl, value & kDebugctlLbrAndBtf & ~ap->debugctl_bits()))
      return false;
    ap->set_debugctl(value);
    return true;
  }
  const kvm_sregs s = kvm_->exit_sregs();
  switch (msr) {
    case PMUVM_MSR_USER_ENTRY:
      // Offered to the bundled kernel without the KVM stepper, which needs no announcement.
      pmu_->enter_user(s.cr3);  // completes a deferred LLWPCB before ring 3 (§5.3)
      backend_->user_entry(value, s);
      return true;
    case PMUVM_MSR_STEP:
      if (backend_->step_reported(value, s)) return true;
      break;  // not offered: #GP, the kernel stops stepping
    case PMUVM_MSR_TASK: task_ = static_cast<uint32_t>(value); return true;
    default: break;
  }
  // A guest that names no tasks (Linux): an LWPCB loaded on a context switch or by LLWPCB belongs
  // to the process whose address space is current, numbered in the order they first profile (a
  // page-table root the kernel reuses for a later process keeps its number).
  if (host_.guest_kind().tasks_by_address_space() && msr == kMsrLwpcbAddress && value != 0)
    task_ = host_.task_of_address_space(s.cr3);
  const MsrOutcome o = pmu_->write_msr(msr, value, s.ss.dpl, s.cr3);
  return o.handled && !o.general_protection;
}

std::optional<uint64_t> VcpuRunner::read_msr(uint32_t msr) {
  const std::optional<uint64_t>& misc_enable = host_.guest_cpu().misc_enable;
  if (msr == kMsrMiscEnable && misc_enable) return *misc_enable;
  if (pmu::arch_perfmon::ArchPmu* ap = pmu_->arch_pmu(); ap && msr == kMsrDebugctl)
    return (kvm_->msr(kMsrDebugctl) & ~ap->debugctl_bits()) | ap->state().debugctl;
  const kvm_sregs s = kvm_->exit_sregs();
  const MsrOutcome o = pmu_->read_msr(msr, s.ss.dpl, s.cr3);
  if (!o.handled || o.general_protection) return std::nullopt;
  return o.value;
}

// The vCPU as the exit handler sees it.
class VcpuExits : public ExitContext {
 public:
  explicit VcpuExits(VcpuRunner& v) : v_(v) {}
  uint32_t index() const override { return v_.index(); }
  std::optional<uint64_t> read_msr(uint32_t msr) override { return v_.read_msr(msr); }
  bool write_msr(uint32_t msr, uint64_t value) override { return v_.write_msr(msr, value); }
  void debug_exit() override { v_.backend_->on_debug_exit(); }
  std::string registers() override { return describe_registers(*v_.kvm_); }
  bool registers_are_reset_state() override {
    return v_.kvm_->regs().rip == 0xFFF0 && v_.kvm_->sregs().cs.selector == 0xF000;
  }
  std::string last_exits() override {
    return "\nthe last exits of this vCPU before it (the fatal one last):\n" + v_.exits_.describe();
  }
  LogBudget& mmio_warnings() override { return v_.mmio_warnings_; }

 private:
  VcpuRunner& v_;
};

bool VcpuRunner::dispatch() {
  VcpuExits context(*this);
  const RunEffect action =
      handle_exit(*kvm_->run_state(), context, host_.io_bus(), host_.guest_kind());
  switch (action.kind) {
    case RunEffect::Kind::kResume: return true;
    // Acted on here, outside every device lock: pausing waits for the other vCPUs to park.
    case RunEffect::Kind::kPause: host_.pause_at_progress(action.text); return true;
    case RunEffect::Kind::kEndRun: host_.finish(action.status); return false;
    case RunEffect::Kind::kFail: host_.fail(action.text); return false;
  }
  return true;
}

}  // namespace vmm
