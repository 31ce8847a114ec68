#include "vmm/precise/step_accountant.h"

namespace vmm {

std::optional<pmu::RetiredInstruction> StepAccountant::account(const GuestRegisters& before,
                                                               std::span<const uint8_t> bytes,
                                                               uint8_t cpl, uint64_t next_rip) {
  std::optional<DecodedInstruction> d = decoder_.decode(bytes, before);
  if (!d) {
    ++undecodable_;
    last_mnemonic_ = ZYDIS_MNEMONIC_INVALID;
    return std::nullopt;
  }
  last_mnemonic_ = d->mnemonic;
  if (d->lwp_instruction) return std::nullopt;  // emulated, never retires (DESIGN §4.4)

  pmu::RetiredInstruction insn;
  insn.rip = before.rip;
  insn.cpl = cpl;
  insn.branch = predictor_.resolve(d->branch, d->direct_target.has_value(), before.rip,
                                   d->fall_through(before.rip), next_rip);
  uint32_t cycles = 1;
  for (uint8_t i = 0; i < d->load_count; ++i) {
    std::optional<pmu::CacheMiss> miss = cache_.load(d->loads[i].address, d->loads[i].size);
    if (!miss) continue;
    cycles += miss->latency_cycles;
    if (insn.cache_miss_count < pmu::RetiredInstruction::kMaxCacheMisses)
      insn.cache_misses[insn.cache_miss_count++] = *miss;
  }
  for (uint8_t i = 0; i < d->store_count; ++i)
    cache_.access(d->stores[i].address, d->stores[i].size, /*is_write=*/true);
  insn.cycles = cycles;
  return insn;
}

void StepAccountant::reset() {
  cache_.reset();
  predictor_.reset();
  undecodable_ = 0;
}

}  // namespace vmm
