#include "pmu/netburst/filter.h"

namespace pmu::netburst {

uint64_t filtered_increments(const FilterConfig& config, const FilterInput& input,
                             bool& edge_previous) {
  if (!config.compare) return input.busy_cycles * input.busy_value + input.retire_value;

  auto passes = [&](uint32_t occurrences) {
    return config.complement ? occurrences <= config.threshold : occurrences > config.threshold;
  };
  const bool busy = passes(input.busy_value);
  const bool last = passes(input.retire_value);

  if (!config.edge) return (busy ? input.busy_cycles : 0) + (last ? 1 : 0);

  // A run of identical cycles has at most one rising edge, at its start.
  uint64_t edges = 0;
  if (input.busy_cycles > 0) {
    if (busy && !edge_previous) ++edges;
    edge_previous = busy;
  }
  if (last && !edge_previous) ++edges;
  edge_previous = last;
  return edges;
}

}  // namespace pmu::netburst
