#include "vmm/machine/exit_handler.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <span>

namespace vmm {
namespace {

RunEffect port_io(kvm_run& run, ExitContext& vcpu, const IoBus& bus) {
  auto* data = reinterpret_cast<uint8_t*>(&run) + run.io.data_offset;
  const bool write = run.io.direction == KVM_EXIT_IO_OUT;
  RunEffect effect;
  for (uint32_t i = 0; i < run.io.count; ++i, data += run.io.size) {
    effect.merge(bus.access(run.io.port, write, std::span(data, run.io.size)));
    if (effect.kind == RunEffect::Kind::kEndRun || effect.kind == RunEffect::Kind::kFail) break;
  }
  if (effect.kind == RunEffect::Kind::kEndRun && !effect.text.empty())
    spdlog::info("vCPU {}: {}: exit status {}", vcpu.index(), effect.text, effect.status);
  return effect;
}

void msr_access(kvm_run& run, ExitContext& vcpu, bool write) {
  bool ok = true;
  if (write) {
    ok = vcpu.write_msr(run.msr.index, run.msr.data);
  } else if (const std::optional<uint64_t> value = vcpu.read_msr(run.msr.index)) {
    run.msr.data = *value;
  } else {
    run.msr.data = 0;
    ok = false;
  }
  run.msr.error = ok ? 0 : 1;
  if (!ok)
    spdlog::debug("vCPU {}: {} MSR {:#x} -> #GP", vcpu.index(), write ? "WRMSR" : "RDMSR",
                  run.msr.index);
}

RunEffect mmio(kvm_run& run, ExitContext& vcpu) {
  if (const LogBudget::Verdict said = vcpu.mmio_warnings().take();
      said != LogBudget::Verdict::kQuiet)
    spdlog::warn("vCPU {}: MMIO {} at {:#x} with no device{}", vcpu.index(),
                 run.mmio.is_write ? "write" : "read", run.mmio.phys_addr, LogBudget::suffix(said));
  if (!run.mmio.is_write) std::memset(run.mmio.data, 0xFF, sizeof run.mmio.data);
  return {};
}

RunEffect fail(std::string text) { return {RunEffect::Kind::kFail, 0, std::move(text)}; }

RunEffect triple_fault(ExitContext& vcpu, const GuestKind& kind) {
  const std::string n = std::to_string(vcpu.index());
  if (kind.triple_fault_is_reset()) {
    spdlog::info("vCPU {}: guest triple fault (a Linux reboot): exit status 0", n);
    return {RunEffect::Kind::kEndRun, 0, {}};
  }
  const std::string registers = vcpu.registers();
  return fail("guest triple fault on vCPU " + n + ": " +
              (vcpu.registers_are_reset_state()
                   ? "registers lost (KVM on AMD SVM resets the vCPU on a shutdown; after the "
                     "reset: " +
                         registers + ")"
                   : registers) +
              vcpu.last_exits());
}

// A fatal exit: the run fails with what is known of the vCPU.
RunEffect fatal(const kvm_run& run, ExitContext& vcpu) {
  const std::string n = std::to_string(vcpu.index());
  switch (run.exit_reason) {
    case KVM_EXIT_FAIL_ENTRY:
      return fail("KVM could not enter vCPU " + n + " (hardware reason " +
                  std::to_string(run.fail_entry.hardware_entry_failure_reason) +
                  "): " + vcpu.registers() + vcpu.last_exits());
    case KVM_EXIT_INTERNAL_ERROR:
      return fail("KVM internal error " + std::to_string(run.internal.suberror) + " on vCPU " + n +
                  ": " + vcpu.registers() + vcpu.last_exits());
    default:
      return fail("unexpected KVM exit reason " + std::to_string(run.exit_reason) + " on vCPU " +
                  n);
  }
}

}  // namespace

// Called at every exit (each step of the KVM stepper): the common exits build no strings.
RunEffect handle_exit(kvm_run& run, ExitContext& vcpu, const IoBus& bus, const GuestKind& kind) {
  switch (run.exit_reason) {
    case KVM_EXIT_IO: return port_io(run, vcpu, bus);
    case KVM_EXIT_X86_RDMSR: msr_access(run, vcpu, false); return {};
    case KVM_EXIT_X86_WRMSR: msr_access(run, vcpu, true); return {};
    case KVM_EXIT_DEBUG: vcpu.debug_exit(); return {};
    case KVM_EXIT_INTR:
    case KVM_EXIT_HLT: return {};
    case KVM_EXIT_MMIO: return mmio(run, vcpu);
    case KVM_EXIT_SHUTDOWN: return triple_fault(vcpu, kind);
    default: return fatal(run, vcpu);
  }
}

}  // namespace vmm
