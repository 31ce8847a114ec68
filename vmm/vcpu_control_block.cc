#include "vmm/vcpu_control_block.h"

namespace vmm {

VcpuControlBlock::VcpuControlBlock(uint32_t vcpu_index, uint32_t apic_id,
                                   const pmu::lwp::Capabilities& lwp, uint64_t seed, GuestRam& ram,
                                   pmu::InterruptSink& interrupts)
    : vcpu_index_(vcpu_index),
      apic_id_(apic_id),
      memory_(ram),
      // Each vCPU draws its own random stream from the VM seed, reproducibly.
      lwp_(lwp, pmu::lwp::UnitConfig{static_cast<uint8_t>(apic_id), seed ^ (0x9E37ull * (vcpu_index + 1))},
           memory_, interrupts) {}

MsrOutcome VcpuControlBlock::read_msr(uint32_t msr, uint8_t cpl, uint64_t cr3) {
  MsrOutcome out;
  memory_.set_cr3(cr3);
  const pmu::lwp::MsrResult r = lwp_.read_msr(msr, cpl, out.value);
  out.handled = r != pmu::lwp::MsrResult::kNotLwpMsr;
  out.general_protection = r == pmu::lwp::MsrResult::kGeneralProtection;
  return out;
}

MsrOutcome VcpuControlBlock::write_msr(uint32_t msr, uint64_t value, uint8_t cpl, uint64_t cr3) {
  MsrOutcome out;
  memory_.set_cr3(cr3);
  const pmu::lwp::MsrResult r = lwp_.write_msr(msr, value, cpl);
  out.handled = r != pmu::lwp::MsrResult::kNotLwpMsr;
  out.general_protection = r == pmu::lwp::MsrResult::kGeneralProtection;
  return out;
}

void VcpuControlBlock::enter_user(uint64_t cr3) {
  memory_.set_cr3(cr3);
  lwp_.enter_user();
}

void VcpuControlBlock::retire(const pmu::RetiredInstruction& insn, uint64_t cr3) {
  memory_.set_cr3(cr3);
  lwp_.retire(insn);
}

std::vector<std::byte> VcpuControlBlock::save_state() const {
  return pmu::lwp::serialize(lwp_.state());
}

std::optional<std::string> VcpuControlBlock::restore_state(std::span<const std::byte> bytes) {
  auto parsed = pmu::lwp::deserialize(bytes);
  if (auto* error = std::get_if<std::string>(&parsed)) return *error;
  return lwp_.load_state(std::get<pmu::lwp::UnitState>(parsed));
}

}  // namespace vmm
