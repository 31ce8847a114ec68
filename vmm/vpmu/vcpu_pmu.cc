#include "vmm/vpmu/vcpu_pmu.h"

#include <algorithm>
#include <stdexcept>

namespace vmm {

VcpuPmu::VcpuPmu(uint32_t vcpu_index, uint32_t apic_id, const pmu::lwp::Capabilities& lwp,
                 uint64_t seed, GuestRam& ram, pmu::InterruptSink& interrupts,
                 std::optional<pmu::netburst::Config> netburst, pmu::PageFaultSink* page_faults,
                 std::optional<pmu::arch_perfmon::Config> arch_pmu, RegistersNow registers)
    : vcpu_index_(vcpu_index),
      apic_id_(apic_id),
      memory_(ram),
      pebs_view_(ram, std::move(registers)),
      // Each vCPU draws its own random stream from the VM seed, reproducibly.
      lwp_(lwp,
           pmu::lwp::UnitConfig{static_cast<uint8_t>(apic_id),
                                seed ^ (0x9E37ull * (vcpu_index + 1))},
           memory_, interrupts, page_faults) {
  if (netburst && arch_pmu)
    throw std::invalid_argument("a vCPU has a NetBurst or an architectural PMU, not both");
  if (netburst) netburst_.emplace(*netburst, interrupts);
  if (arch_pmu && arch_pmu->pebs && !pebs_view_.has_registers())  // (`registers` moved there)
    throw std::invalid_argument("an architectural PMU with PEBS needs the vCPU's registers");
  if (arch_pmu) arch_pmu_.emplace(*arch_pmu, interrupts, arch_pmu->pebs ? &pebs_view_ : nullptr);
}

namespace {

MsrOutcome outcome(pmu::lwp::MsrResult r, uint64_t value) {
  return MsrOutcome{r != pmu::lwp::MsrResult::kNotLwpMsr,
                    r == pmu::lwp::MsrResult::kGeneralProtection, value};
}
MsrOutcome outcome(pmu::netburst::MsrResult r, uint64_t value) {
  return MsrOutcome{r != pmu::netburst::MsrResult::kNotNetburstMsr,
                    r == pmu::netburst::MsrResult::kGeneralProtection, value};
}
MsrOutcome outcome(pmu::arch_perfmon::MsrResult r, uint64_t value) {
  return MsrOutcome{r != pmu::arch_perfmon::MsrResult::kNotArchPerfmonMsr,
                    r == pmu::arch_perfmon::MsrResult::kGeneralProtection, value};
}

}  // namespace

MsrOutcome VcpuPmu::read_msr(uint32_t msr, uint8_t cpl, uint64_t cr3) {
  memory_.set_cr3(cr3);
  uint64_t value = 0;  // sequenced: the read must happen before `value` is copied out
  if (pmu::lwp::LwpUnit::is_lwp_msr(msr)) {
    const pmu::lwp::MsrResult r = lwp_.read_msr(msr, cpl, value);
    return outcome(r, value);
  }
  if (netburst_) {
    const pmu::netburst::MsrResult r = netburst_->rdmsr(msr, value);
    return outcome(r, value);
  }
  if (arch_pmu_) {
    const pmu::arch_perfmon::MsrResult r = arch_pmu_->rdmsr(msr, value);
    return outcome(r, value);
  }
  return MsrOutcome{};
}

MsrOutcome VcpuPmu::write_msr(uint32_t msr, uint64_t value, uint8_t cpl, uint64_t cr3) {
  memory_.set_cr3(cr3);
  if (pmu::lwp::LwpUnit::is_lwp_msr(msr)) return outcome(lwp_.write_msr(msr, value, cpl), 0);
  if (netburst_) return outcome(netburst_->wrmsr(msr, value), 0);
  if (arch_pmu_) return outcome(arch_pmu_->wrmsr(msr, value), 0);
  return MsrOutcome{};
}

void VcpuPmu::enter_user(uint64_t cr3) {
  memory_.set_cr3(cr3);
  lwp_.enter_user();
}

void VcpuPmu::retire(const pmu::RetiredInstruction& insn, uint64_t cr3) {
  memory_.set_cr3(cr3);
  pebs_view_.set_cr3(cr3);
  lwp_.retire(insn);
  if (netburst_) netburst_->retire(insn);
  if (arch_pmu_) arch_pmu_->retire(insn);
}

uint64_t VcpuPmu::quiet_retirements() const {
  uint64_t quiet = lwp_.quiet_retirements();
  if (netburst_) quiet = std::min(quiet, netburst_->quiet_retirements());
  if (arch_pmu_) quiet = std::min(quiet, arch_pmu_->quiet_retirements());
  return quiet;
}

pmu::UnseenAllowance VcpuPmu::unseen_allowance() const {
  pmu::UnseenAllowance allowance = lwp_.unseen_allowance();
  if (netburst_) allowance &= netburst_->unseen_allowance();
  if (arch_pmu_) allowance &= arch_pmu_->unseen_allowance();
  return allowance;
}

void VcpuPmu::retire_unseen(const pmu::UnseenRetirements& batch) {
  lwp_.retire_unseen(batch);
  if (netburst_) netburst_->retire_unseen(batch);
  if (arch_pmu_) arch_pmu_->retire_unseen(batch);
}

std::vector<std::byte> VcpuPmu::save_state() const { return pmu::lwp::serialize(lwp_.state()); }

Status VcpuPmu::restore_state(std::span<const std::byte> bytes) {
  const pmu::Result<pmu::lwp::UnitState> parsed = pmu::lwp::deserialize(bytes);
  if (!parsed.ok()) return Error::usage(parsed.reason());
  if (const pmu::Status loaded = lwp_.load_state(*parsed); !loaded.ok())
    return Error::usage(loaded.reason());
  return {};
}

std::optional<std::vector<std::byte>> VcpuPmu::save_netburst_state() const {
  if (!netburst_) return std::nullopt;
  return pmu::netburst::serialize(netburst_->state());
}

Status VcpuPmu::restore_netburst_state(const std::vector<std::byte>* bytes) {
  if (!netburst_ && !bytes) return {};
  if (!netburst_) return Error::usage("NetBurst state, but the CPU profile has no NetBurst PMU");
  if (!bytes) return Error::usage("no NetBurst state, but the CPU profile has a NetBurst PMU");
  const pmu::Result<pmu::netburst::PmuState> state = pmu::netburst::deserialize(*bytes);
  if (!state.ok()) return Error::usage(state.reason());
  if (const pmu::Status loaded = netburst_->load_state(*state); !loaded.ok())
    return Error::usage(loaded.reason());
  return {};
}

std::optional<pmu::arch_perfmon::ArchPmuState> VcpuPmu::arch_pmu_state() const {
  if (!arch_pmu_) return std::nullopt;
  return arch_pmu_->state();
}

Status VcpuPmu::restore_arch_pmu_state(const pmu::arch_perfmon::ArchPmuState* state) {
  if (!arch_pmu_ && !state) return {};
  if (!arch_pmu_)
    return Error::usage("architectural PMU state, but the CPU profile has no architectural PMU");
  if (!state)
    return Error::usage("no architectural PMU state, but the CPU profile has an architectural PMU");
  if (const pmu::Status loaded = arch_pmu_->load_state(*state); !loaded.ok())
    return Error::usage(loaded.reason());
  return {};
}

}  // namespace vmm
