// The CCCR's event filter: how many counter increments one retired instruction produces from
// its per-cycle event input (SDM "CCCR": Compare, Complement, Threshold, Edge).
//
//   Compare clear:  the counter adds the number of occurrences of every cycle.
//   Compare set:    each cycle gives one increment when  occurrences >  threshold  (Complement
//                   clear) or  occurrences <= threshold  (Complement set), else none.
//   Edge (with Compare only): one increment per false->true transition of that comparison.
//
// The instruction's cycles are max(cycles, 1): all but the last carry `busy_value`
// occurrences, the last carries `retire_value` (events.h). The edge detector's previous output
// lives in the counter (EdgeState) across instructions; it starts false when the CCCR is
// written, so a comparison already true in the first observed cycle counts as a rising edge.
// Cycles the counting backend never reports (the guest ran while no counter was enabled, HLT)
// are not seen by the filter.
#pragma once

#include <cstdint>

namespace pmu::netburst {

struct FilterConfig {
  bool compare = false;
  bool complement = false;
  bool edge = false;
  uint8_t threshold = 0;  // 0..15
};

struct FilterInput {
  uint64_t busy_cycles = 0;   // cycles before the retirement cycle
  uint32_t busy_value = 0;    // occurrences in each of them
  uint32_t retire_value = 0;  // occurrences in the retirement cycle
};

// Increments for one instruction; updates `edge_previous` (the last cycle's comparison output).
uint64_t filtered_increments(const FilterConfig& config, const FilterInput& input,
                             bool& edge_previous);

}  // namespace pmu::netburst
