// A vCPU's exits (Machine::Impl::dispatch): the exit handler (vmm/machine/exit_handler.h) decides
// from the kvm_run page; this file gives it the vCPU (its MSRs: the PMU models and pmuvm's
// paravirtual MSRs; its stepper; its registers) and acts on what it returns.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <optional>
#include <string>

#include "guest/abi/pmuvm_abi.h"
#include "vmm/machine/exit_handler.h"
#include "vmm/machine_impl.h"

namespace vmm {
namespace {

constexpr uint32_t kMsrLwpcbAddress = 0xC0000106;  // LWPMSR1

}  // namespace

uint32_t Machine::Impl::linux_task(uint64_t cr3) {
  std::lock_guard<std::mutex> g(report_lock);
  // Every exec or fork makes an address space: past the report's limit they share one entry
  // (the guest must not grow this map without bound).
  if (linux_tasks.size() >= LwpReport::kMaxTasks && !linux_tasks.count(cr3))
    return LwpReport::kOtherTasks;
  auto [it, added] = linux_tasks.emplace(cr3, static_cast<uint32_t>(linux_tasks.size() + 1));
  if (added) {
    char name[48];
    std::snprintf(name, sizeof name, "CR3 %#llx", static_cast<unsigned long long>(cr3));
    report.set_task_name(it->second, name);
  }
  return it->second;
}

// CPL is SS.DPL (architecturally equal to it; AMD keeps CPL there, and KVM's SVM code reports it
// so). A selector's RPL is what the guest loaded, not the privilege level.
bool Machine::Impl::write_msr(Vcpu& v, uint32_t msr, uint64_t value) {
  const kvm_sregs s = v.kvm->exit_sregs();
  const StepContext ctx{s.cr3, s.fs.base, s.gs.base};
  switch (msr) {
    case PMUVM_MSR_USER_ENTRY:
      // Offered to the bundled kernel without the KVM stepper, which needs no announcement.
      v.control->enter_user(s.cr3);  // completes a deferred LLWPCB before ring 3 (§5.3)
      if (v.guest_stepper)
        if (auto retired = v.guest_stepper->on_user_entry(value, ctx)) {
          v.control->retire(*retired, s.cr3);
          // A SYSCALL counted late: its next boundary was in the kernel (pmuvm_abi.h).
          deliver_page_fault(v, [](const VcpuPageFaults::Fault&) { return false; });
        }
      return true;
    case PMUVM_MSR_STEP:
      if (!v.guest_stepper) break;  // not offered: #GP, the kernel stops stepping
      if (auto retired = v.guest_stepper->on_step(value, ctx)) {
        v.control->retire(*retired, s.cr3);
        count_instruction(v);
        // The #DB handler's frame is the boundary after the instruction: the kernel handles it
        // as a user #PF when the VMM marks it (PMUVM_VECTOR_LWP_PAGE_FAULT).
        deliver_page_fault(v, [&](const VcpuPageFaults::Fault& f) {
          if (!v.guest_stepper->mark_page_fault(value, f.error_code)) return false;
          v.kvm->set_cr2(f.linear);
          return true;
        });
      }
      return true;
    case PMUVM_MSR_TASK: v.task = static_cast<uint32_t>(value); return true;
    default: break;
  }
  // A guest that names no tasks (Linux): an LWPCB loaded on a context switch or by LLWPCB belongs
  // to the process whose address space is current, numbered in the order they first profile (a
  // page-table root the kernel reuses for a later process keeps its number).
  if (guest_kind->tasks_by_address_space() && msr == kMsrLwpcbAddress && value != 0)
    v.task = linux_task(s.cr3);
  const MsrOutcome o = v.control->write_msr(msr, value, s.ss.dpl, s.cr3);
  return o.handled && !o.general_protection;
}

std::optional<uint64_t> Machine::Impl::read_msr(Vcpu& v, uint32_t msr) {
  if (msr == kMsrMiscEnable && options.profile.misc_enable) return *options.profile.misc_enable;
  const kvm_sregs s = v.kvm->exit_sregs();
  const MsrOutcome o = v.control->read_msr(msr, s.ss.dpl, s.cr3);
  if (!o.handled || o.general_protection) return std::nullopt;
  return o.value;
}

class Machine::Impl::VcpuExitContext : public ExitContext {
 public:
  VcpuExitContext(Impl& machine, Vcpu& v) : machine_(machine), v_(v) {}
  uint32_t index() const override { return v_.kvm->index(); }
  std::optional<uint64_t> read_msr(uint32_t msr) override { return machine_.read_msr(v_, msr); }
  bool write_msr(uint32_t msr, uint64_t value) override {
    return machine_.write_msr(v_, msr, value);
  }
  void debug_exit() override { machine_.on_step(v_); }
  std::string registers() override { return describe_registers(*v_.kvm); }
  bool registers_are_reset_state() override {
    return v_.kvm->regs().rip == 0xFFF0 && v_.kvm->sregs().cs.selector == 0xF000;
  }
  std::string last_exits() override {
    return "\nthe last exits of this vCPU before it (the fatal one last):\n" + v_.exits.describe();
  }
  LogBudget& mmio_warnings() override { return v_.mmio_warnings; }

 private:
  Impl& machine_;
  Vcpu& v_;
};

bool Machine::Impl::dispatch(Vcpu& v) {
  VcpuExitContext context(*this, v);
  const ExitAction action = handle_exit(*v.kvm->run_state(), context, io_bus, *guest_kind);
  switch (action.kind) {
    case ExitAction::Kind::kResume: return true;
    // Acted on here, outside every device lock: pausing waits for the other vCPUs to park.
    case ExitAction::Kind::kPause: pause_at_progress(action.text); return true;
    case ExitAction::Kind::kEndRun: finish(action.status); return false;
    case ExitAction::Kind::kFail: fail(action.text); return false;
  }
  return true;
}

}  // namespace vmm
