// The pseudo-random source for LWPCB.Random (DESIGN §4.2): seeded by the VM, part of the
// per-vCPU save area, so the same seed gives the same run, also across snapshot and migration.
// SplitMix64: one 64-bit word of state, full period, cheap, and trivially serialisable.
#pragma once

#include <cstdint>

namespace pmu::lwp {

class Prng {
 public:
  explicit Prng(uint64_t seed = 0) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  uint64_t state() const { return state_; }
  void set_state(uint64_t state) { state_ = state; }

 private:
  uint64_t state_;
};

}  // namespace pmu::lwp
