#include "vmm/precise/step_accountant.h"

#include <algorithm>

namespace vmm {

std::optional<pmu::RetiredInstruction> StepAccountant::account(const GuestRegisters& before,
                                                               std::span<const uint8_t> bytes,
                                                               uint8_t cpl, uint64_t next_rip) {
  const std::optional<DecodedInstruction> d = decoder_.decode(bytes, before);
  if (!d) {
    ++undecodable_;
    last_mnemonic_ = ZYDIS_MNEMONIC_INVALID;
    return std::nullopt;
  }
  return account(before, *d, cpl, next_rip);
}

std::optional<pmu::RetiredInstruction> StepAccountant::account(const GuestRegisters& before,
                                                               const DecodedInstruction& decoded,
                                                               uint8_t cpl, uint64_t next_rip) {
  last_mnemonic_ = decoded.mnemonic;
  if (decoded.lwp_instruction) return std::nullopt;  // emulated, never retires (DESIGN §4.4)

  pmu::RetiredInstruction insn;
  insn.rip = before.rip;
  insn.cpl = cpl;
  const ModelDemand demand = demand_ ? demand_() : ModelDemand{};
  insn.branch = demand.predictor
                    ? predictor_.resolve(decoded.branch, decoded.direct_target.has_value(),
                                         before.rip, decoded.fall_through(before.rip), next_rip)
                    : pmu::branch::BranchPredictor::outcome(
                          decoded.branch, decoded.fall_through(before.rip), next_rip);
  insn.branch.indirect = insn.is_branch() && !decoded.relative_branch;
  insn.loads = decoded.reads_memory;
  insn.stores = decoded.writes_memory;
  if (decoded.load_count > 0) insn.load_address = decoded.loads[0].address;
  if (decoded.store_count > 0) insn.store_address = decoded.stores[0].address;
  uint32_t cycles = 1;
  insn.cycles = cycles;
  if (!demand.cache) return insn;
  for (uint8_t i = 0; i < decoded.load_count; ++i) {
    std::optional<pmu::CacheMiss> miss =
        cache_.load(decoded.loads[i].address, decoded.loads[i].size);
    // An L1 hit costs its load-to-use latency too; only misses add cycles (the model charges
    // the L1's latency to the pipeline: one cycle per instruction).
    insn.load_latency = std::max(
        insn.load_latency, miss ? miss->latency_cycles : cache_.geometry().l1d.latency_cycles);
    if (!miss) continue;
    cycles += miss->latency_cycles;
    if (insn.cache_miss_count < pmu::RetiredInstruction::kMaxCacheMisses)
      insn.cache_misses[insn.cache_miss_count++] = *miss;
  }
  for (uint8_t i = 0; i < decoded.store_count; ++i) {
    const pmu::cache::AccessResult r =
        cache_.access(decoded.stores[i].address, decoded.stores[i].size, /*is_write=*/true);
    if (i == 0) insn.store_hit_l1 = r.level == pmu::cache::Level::kL1;
  }
  insn.cycles = cycles;
  return insn;
}

void StepAccountant::reset() {
  cache_.reset();
  predictor_.reset();
  undecodable_ = 0;
}

}  // namespace vmm
