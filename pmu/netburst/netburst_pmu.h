// One vCPU's virtual Intel NetBurst (Pentium 4) PMU: 18 counters, 18 CCCRs, 45 ESCRs, counter-
// overflow PMIs through InterruptSink::raise_performance_interrupt() (the LAPIC LVTPC entry; the
// VMM handles mask, delivery mode and vector). VMM-agnostic: it learns about execution only from
// a counting backend's RetiredInstruction reports.
//
// MSR rules (rdmsr/wrmsr; the caller has already checked CPL 0, as the CPU does):
//  * 0x300-0x3FF belongs to this PMU. Counters 0x300+n and CCCRs 0x360+n for n < counters, the
//    45 ESCRs (IQ_ESCR0/1 only when Config::iq_escrs): kOk. Any other address in the block
//    (holes, counters/CCCRs beyond Config::counters, 0x3BF, 0x3F0-0x3FF, PEBS MSRs): #GP.
//    Outside the block: kNotNetburstMsr, the caller handles it.
//  * Counters: WRMSR stores the low counter_bits (40) bits and ignores bits 63:40, so a 64-bit
//    sign-extended negative value and its 40-bit two's complement give the same counter value
//    (the SDM: "enter a 2s complement negative integer"); RDMSR returns the 40-bit value,
//    zero-extended. Writing a counter never sets or clears OVF and never raises a PMI.
//  * ESCRs and CCCRs: a reserved bit set -> #GP, nothing changes (escr.h, cccr.h give the rule
//    per register); otherwise stored as written and read back unchanged.
//
// Counting (per retired instruction, retire()):
//  * A counter counts while its CCCR Enable is set, or while Cascade is set and its alternate
//    counter's CCCR has OVF set (binding.h; SDM "Cascading Counters": the cascaded counter starts
//    when the alternate overflows and stops when that OVF is cleared or Cascade is cleared). The
//    condition is sampled before the instruction is counted, so a cascaded counter starts with
//    the instruction after the one that overflowed its alternate. The model-2 erratum "no PMI in
//    cascade mode" is not modelled: cascaded counters raise PMIs like any other.
//  * The counter reads the ESCR its CCCR's ESCR select names for it (binding.h). A selection
//    the counter cannot use, an event this model does not count (events.h), or an active-thread
//    value other than 01/11 (cccr.h) gives no increments at all.
//  * ESCR T0_OS qualifies CPL 0, T0_USR CPL 1-3; a disqualified instruction has zero occurrences
//    in each of its cycles (so Compare+Complement still counts those cycles, as on hardware).
//    T1_OS/T1_USR are inert (single-threaded profile).
//  * Compare/Complement/Threshold/Edge act per cycle (filter.h).
//  * All increments of one instruction are added at once. The counter wraps modulo 2^40; a wrap
//    sets OVF (sticky: only software writing the CCCR with OVF clear clears it). FORCE_OVF makes
//    every update with at least one increment an overflow (sets OVF).
//  * PMI timing. Default (DESIGN §4.4, the seed spec/netburst-escr-cccr-notes-ja.txt §2.1/§2.4):
//    PmiTiming::kAtOverflow — a counter preset to -N counts up to -1 and overflows on the N-th
//    event, and that event raises the PMI, so a preset of -1000 gives one PMI per 1000 events.
//    PmiTiming::kNextEventCount is the SDM's wording (CCCR OVF_PMI: "the PMI is generated on the
//    next event count after the counter has overflowed"; hence its advice to preset -N+1): an
//    overflow with OVF_PMI_T0 set arms the counter, and its next increment raises the PMI if
//    OVF_PMI_T0 is still set then; an overflow in the middle of an instruction's increments is
//    followed by its next increment in the same instruction. A profile option, never the default.
//    Either way one PMI per overflow, except that all PMIs one counter owes within one retired
//    instruction are raised once (the LVTPC masks itself on delivery anyway; only FORCE_OVF or
//    a very large per-instruction increment can produce two). Counter and CCCR writes between
//    the overflow and the next increment do not cancel an armed PMI (only OVF_PMI_T0 being clear
//    at that increment does); reset() and load_state() replace it.
//    OVF_PMI_T1 never raises anything.
//  * wants_events() is true while any counter counts (Enable, or a live cascade); the backend
//    must then report every instruction at every CPL the guest wants counted.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "pmu/status.h"
#include "pmu/interrupt_sink.h"
#include "pmu/netburst/binding.h"
#include "pmu/netburst/events.h"
#include "pmu/netburst/filter.h"
#include "pmu/netburst/msr_map.h"
#include "pmu/netburst/save_state.h"
#include "pmu/retired_instruction.h"
#include "pmu/unseen_retirements.h"

namespace pmu::netburst {

enum class MsrResult : uint8_t {
  kOk,
  kGeneralProtection,  // the VMM injects #GP; nothing changed
  kNotNetburstMsr,     // outside 0x300-0x3FF: the caller handles it
};

enum class PmiTiming : uint8_t {
  kNextEventCount = 0,  // SDM: the PMI comes with the first increment after the overflow
  kAtOverflow = 1,      // the seed (default): the PMI comes with the increment that overflows
};

struct Config {
  uint32_t counters = kMaxCounters;  // counters/CCCRs 0..counters-1 exist (1..18)
  uint32_t counter_bits = 40;        // counter width (32..40)
  uint32_t threads_per_core = 1;     // only 1 is modelled (T1 bits inert)
  bool iq_escrs = true;              // IQ_ESCR0/1 exist (family 0xF models 1 and 2)
  bool third_level_cache = false;    // BSQ_cache_reference 3rd-level masks can count
  PmiTiming pmi_timing = PmiTiming::kAtOverflow;
  bool operator==(const Config&) const = default;
};

// Ok when `config` can be modelled, else refused with why (one line).
pmu::Status validate(const Config& config);

struct Stats {
  uint64_t instructions = 0;  // retire() calls that found a counting counter
  uint64_t overflows = 0;     // counter overflows (wraps and forced)
  uint64_t pmis = 0;          // raise_performance_interrupt() calls
  bool operator==(const Stats&) const = default;
};

// What a counter is set up to do, for diagnostics and logs (e.g. "guest enabled an unmodelled
// event").
struct CounterView {
  bool exists = false;
  bool counting = false;             // Enable, or a live cascade
  std::optional<Escr> escr;          // the ESCR its ESCR select names for it
  const EventInfo* event = nullptr;  // the event that ESCR selects, if any
  bool counts_events = false;        // binding valid, event modelled, active thread counts
};

class NetburstPmu {
 public:
  // `config` must pass validate(); otherwise the constructor throws std::invalid_argument.
  NetburstPmu(const Config& config, InterruptSink& interrupts);

  static constexpr bool owns_msr(uint32_t msr) {
    return msr >= kMsrRangeFirst && msr <= kMsrRangeLast;
  }

  MsrResult wrmsr(uint32_t msr, uint64_t value);
  MsrResult rdmsr(uint32_t msr, uint64_t& value) const;

  // A counting backend reports one retired instruction.
  void retire(const RetiredInstruction& insn);

  // Called at every PMI the PMU raises, with the counter that raised it and the instruction whose
  // retirement raised it (RIP 0, CPL 3 for a batch of unseen instructions): a sample, as a
  // profiler's PMI handler takes one (vmm/report/perf_data.h).
  using PmiObserver = std::function<void(int counter, uint64_t rip, uint8_t cpl)>;
  void set_pmi_observer(PmiObserver observer) { pmi_observer_ = std::move(observer); }

  bool wants_events() const;
  // How many instructions a backend may retire in one run before reporting them, with no
  // overflow (and so no PMI, no cascade start) possible before the last of the run (a block
  // stepper's block, DESIGN §4.7; events that count cycles or cache references answer 1). At
  // least 1.
  uint64_t quiet_retirements() const;
  // Host counting (DESIGN §4.11): how many CPL-3 instructions may retire unseen now, reported
  // afterwards as one batch. Counters whose increments follow from the number of instructions
  // (instr_retired NBOGUSNTAG) or of branches (branch_retired with all four MMxx masks) alone, at
  // T0_USR without T0_OS and without Compare, allow a batch up to their wrap (an armed or forced
  // overflow: none); any other counting counter needs every instruction.
  UnseenAllowance unseen_allowance() const;
  // The batch retired (unseen_allowance().admits(batch), else std::logic_error): the same state
  // as retire() of each of its instructions.
  void retire_unseen(const UnseenRetirements& batch);
  // Whether a counting counter's increments depend on the backend's cache model (cache
  // references; cycles, which cache misses lengthen: global_power_events, any Compare) or on
  // its branch predictor (mispredicted branches; branch_retired masks that tell predicted from
  // mispredicted). A backend may leave those models alone otherwise.
  bool reads_cache_model() const;
  bool reads_branch_predictions() const;
  // Whether an instruction at CPL 0 can change any counter: some counting counter has T0_OS,
  // or counts with Compare+Complement (then a disqualified instruction still counts its cycles).
  // A stepper may leave kernel code unstepped while this is false.
  bool wants_kernel_events() const;

  // Snapshot / migration. load_state() checks that the state fits this PMU (counter count and
  // width, IQ ESCRs, reserved bits) and changes nothing when it does not.
  PmuState state() const;
  pmu::Status load_state(const PmuState& state);

  // Processor reset: every counter, CCCR and ESCR 0 (SDM: all initialised to 0 on reset).
  // stats() are cumulative over the PMU's life and survive reset().
  void reset();

  CounterView counter_view(int counter) const;
  const Config& config() const { return config_; }
  const Stats& stats() const { return stats_; }
  uint64_t counter_mask() const { return counter_mask_; }

 private:
  struct Setup {
    bool counts = false;
    EventKind kind = EventKind::kUnmodelled;
    uint16_t mask = 0;
    bool os = false;
    bool usr = false;
    FilterConfig filter;
  };

  bool exists(int counter) const {
    return counter >= 0 && counter < static_cast<int>(config_.counters);
  }
  bool escr_exists(Escr e) const { return config_.iq_escrs || !escr_info(e).model_specific; }
  uint32_t counting_mask() const;
  void rebuild_setups();
  void advance(int counter, uint64_t increments);
  // What a batch of unseen instructions adds to counter n (unseen_allowance() admitted it).
  uint64_t unseen_increments(const Setup& s, const UnseenRetirements& batch) const;

  const Config config_;
  InterruptSink& interrupts_;
  PmiObserver pmi_observer_;
  uint64_t retiring_rip_ = 0;  // the instruction retire() reports, for pmi_observer_
  uint8_t retiring_cpl_ = 3;
  const uint64_t counter_mask_;
  const EventEnvironment environment_;

  std::array<uint64_t, kMaxCounters> counters_{};
  std::array<uint64_t, kMaxCounters> cccrs_{};
  std::array<uint64_t, kEscrCount> escrs_{};
  uint32_t pending_pmi_ = 0;
  uint32_t edge_previous_ = 0;
  std::array<Setup, kMaxCounters> setups_{};
  uint32_t enabled_ = 0;  // bit n: CCCR n Enable
  uint32_t cascade_ = 0;  // bit n: CCCR n Cascade and counter n has an existing alternate
  Stats stats_;
};

}  // namespace pmu::netburst
