// libFuzzer target for the NetBurst PMU state a snapshot or a migration stream carries (DESIGN
// §4.12: anyone can recompute the CRCs), and for the promise block stepping relies on: bytes are
// parsed (pmu/netburst/save_state.h deserialize) and loaded into a PMU (load_state); a PMU that
// accepted them then retires instructions, and before each run of quiet_retirements()
// instructions (capped at 64) no overflow may happen and no PMI be raised before the run's last
// instruction (netburst_pmu.h). Build and run with tests/fuzz/run_fuzzer.sh netburst_state_fuzz.
//
// Input: byte 0 picks the PMI timing (bit 0) and the instruction mix seed; then a serialized
// PmuState. Seeds (corpus_netburst_state/): serialize() of states with counters near overflow.
#include <cstddef>
#include <cstdint>
#include <span>

#include "pmu/netburst/netburst_pmu.h"
#include "pmu/netburst/save_state.h"
#include "tests/support/recording_interrupt_sink.h"

namespace {

// The OVF bits of every CCCR (bit 31): an overflow sets one.
uint64_t overflow_bits(const pmu::netburst::NetburstPmu& pmu) {
  const pmu::netburst::PmuState s = pmu.state();
  uint64_t bits = 0;
  for (int n = 0; n < s.counter_count; ++n)
    if (s.cccrs[n] & (1u << 31)) bits |= uint64_t{1} << n;
  return bits;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const auto parsed =
      pmu::netburst::deserialize(std::span(reinterpret_cast<const std::byte*>(data + 1), size - 1));
  if (!parsed.ok()) return 0;
  const pmu::netburst::PmuState& state = parsed.value();
  pmu::netburst::Config config;
  config.pmi_timing = (data[0] & 1) ? pmu::netburst::PmiTiming::kNextEventCount
                                    : pmu::netburst::PmiTiming::kAtOverflow;
  pmu::testing::RecordingInterruptSink sink;
  pmu::netburst::NetburstPmu pmu(config, sink);
  if (!pmu.load_state(state).ok()) return 0;  // refused, with its reason: nothing changed

  uint32_t mix = data[0] | 1u;
  auto next = [&] { return mix = mix * 1103515245u + 12345u; };
  for (int run = 0; run < 16; ++run) {
    const uint64_t quiet = pmu.quiet_retirements();
    if (quiet == 0) __builtin_trap();  // "at least 1"
    const uint64_t length = quiet < 64 ? quiet : 64;
    for (uint64_t i = 0; i < length; ++i) {
      pmu::RetiredInstruction insn;
      insn.rip = 0x401000 + 4 * i;
      insn.cpl = (next() >> 8) & 1 ? 3 : 0;
      insn.cycles = 1 + ((next() >> 8) % 4 == 0 ? (next() >> 8) % 300 : 0);
      if ((next() >> 9) % 3 == 0) {
        insn.branch.kind = pmu::BranchKind::kConditional;
        insn.branch.taken = (next() >> 7) & 1;
        insn.branch.prediction_valid = true;
        insn.branch.predicted_correctly = (next() >> 7) & 1;
      }
      const int pmis = sink.pmis;
      const uint64_t overflows = overflow_bits(pmu);
      pmu.retire(insn);
      const bool last = i + 1 == length && length == quiet;
      // Before the run's last instruction nothing may show: no PMI, no new overflow.
      if (!last && (sink.pmis != pmis || (overflow_bits(pmu) & ~overflows) != 0)) __builtin_trap();
    }
  }
  return 0;
}
