// The counting code both steppers of the precise backend share (DESIGN §4.7): given the state
// before one guest instruction and where execution went after it, it decodes the instruction,
// classifies it, runs its loads and stores through the vCPU's cache model, resolves branches
// through the modelled predictor, and returns the RetiredInstruction the PMU models count.
//
// Counting rules (DESIGN §4.4): LLWPCB/SLWPCB are emulated through #UD and do not retire;
// SYSCALL retires as one instruction and is not a branch; everything else that the stepper
// reports retired is one instruction.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <type_traits>

#include "pmu/branch/branch_predictor.h"
#include "pmu/cache/cache_model.h"
#include "pmu/retired_instruction.h"
#include "pmu/state_archive.h"
#include "vmm/precise/instruction_decoder.h"

namespace vmm {

class StepAccountant {
 public:
  explicit StepAccountant(const pmu::cache::Geometry& cache) : cache_(cache) {}

  // `bytes` are the instruction bytes fetched at before.rip (up to 15); `next_rip` is the RIP after
  // the instruction retired. nullopt when the instruction does not count as retired or the bytes
  // do not decode (then `undecodable()` grows: the stepper logs it).
  std::optional<pmu::RetiredInstruction> account(const GuestRegisters& before,
                                                 std::span<const uint8_t> bytes, uint8_t cpl,
                                                 uint64_t next_rip);
  // The same for an instruction already decoded from before's registers (the KVM stepper decodes
  // the pending instruction once, to plan its successor; decoding is most of a step's VMM work).
  std::optional<pmu::RetiredInstruction> account(const GuestRegisters& before,
                                                 const DecodedInstruction& decoded, uint8_t cpl,
                                                 uint64_t next_rip);

  // Which models an enabled event reads now, asked before each instruction is accounted. Without
  // the cache, loads and stores leave it alone and report no misses, so a VM that profiles only
  // instructions and branches never fills (or saves) the model's megabytes; without the
  // predictor, branches neither train it nor carry a prediction. Either way a model's state
  // follows only the instructions of events that read it, whichever backend counts the others
  // (the host backend's unseen instructions never reach it). Not set: both, always (unit tests of
  // the models through the accountant).
  struct ModelDemand {
    bool cache = true;
    bool predictor = true;
  };
  void set_model_demand(std::function<ModelDemand()> demand) { demand_ = std::move(demand); }

  uint64_t undecodable() const { return undecodable_; }
  const InstructionDecoder& decoder() const { return decoder_; }
  // The mnemonic of the last instruction account() decoded (INVALID before any).
  ZydisMnemonic last_mnemonic() const { return last_mnemonic_; }
  void reset();

  // Snapshot / migration: the models whose contents decide later records.
  template <class Archive>
  void archive(Archive& a) {
    // The mnemonic travels as its number; a loaded one must name a mnemonic (an enum without a
    // fixed underlying type holding another value is undefined behaviour: stepper_state_fuzz).
    auto mnemonic = static_cast<std::underlying_type_t<ZydisMnemonic>>(last_mnemonic_);
    a(cache_, predictor_, undecodable_, mnemonic);
    if constexpr (Archive::kLoading) {
      if (static_cast<uint64_t>(mnemonic) > ZYDIS_MNEMONIC_MAX_VALUE)
        throw pmu::StateFormatError("step accountant: mnemonic " + std::to_string(mnemonic) +
                                    " is not one Zydis knows");
      last_mnemonic_ = static_cast<ZydisMnemonic>(mnemonic);
    }
  }

 private:
  InstructionDecoder decoder_;
  pmu::cache::CacheModel cache_;
  pmu::branch::BranchPredictor predictor_;
  uint64_t undecodable_ = 0;
  ZydisMnemonic last_mnemonic_ = ZYDIS_MNEMONIC_INVALID;
  std::function<ModelDemand()> demand_;
};

}  // namespace vmm
