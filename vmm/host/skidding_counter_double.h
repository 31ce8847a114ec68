// HostCounters without a PMU (DESIGN §4.11; tests, and the bench's estimate of the host
// backend's exits): while armed, the run loop keeps stepping the guest with the precise stepper
// and hands each retired instruction to count() instead of to the PMU models. The double counts
// CPL-3 instructions, branches and conditional branches as guest-only host counters would, and ends
// the run `skid` instructions after a kind reached its period: a real PMU's late overflow signal,
// with the skid chosen (0, 1, the margin, past the margin to see the fall-back).
#pragma once

#include <cstdint>
#include <optional>

#include "pmu/retired_instruction.h"
#include "vmm/host/host_counters.h"

namespace vmm {

class SkiddingCounterDouble : public HostCounters {
 public:
  explicit SkiddingCounterDouble(uint64_t skid) : skid_(skid) {}

  void arm(const FreeRun& run) override;
  pmu::UnseenRetirements disarm() override;

  bool armed() const { return run_.has_value(); }
  // One instruction retired while armed (others than CPL 3 do not count). True: the overflow
  // signal arrives after it, the run ends here.
  bool count(const pmu::RetiredInstruction& insn);
  // How many more instructions may retire before the run must end (a block stepper may run
  // that many in one exit, so the kick is not delayed past the chosen skid). At least 1 while
  // armed; UINT64_MAX when not armed.
  uint64_t instructions_to_kick() const;

 private:
  const uint64_t skid_;
  std::optional<FreeRun> run_;
  pmu::UnseenRetirements counted_;
  // The instruction count at which the overflow signal arrives (once a period was reached).
  std::optional<uint64_t> kick_at_;
};

}  // namespace vmm
