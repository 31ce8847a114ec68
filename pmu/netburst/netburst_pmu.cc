#include "pmu/netburst/netburst_pmu.h"

#include <algorithm>
#include <bit>
#include <stdexcept>

#include "pmu/netburst/cccr.h"
#include "pmu/netburst/escr.h"

namespace pmu::netburst {

pmu::Status validate(const Config& c) {
  if (c.counters < 1 || c.counters > kMaxCounters)
    return pmu::Status::refused("NetBurst PMU: " + std::to_string(c.counters) +
                                " counters (1..18 supported)");
  if (c.counter_bits < 32 || c.counter_bits > 40)
    return pmu::Status::refused("NetBurst PMU: " + std::to_string(c.counter_bits) +
                                "-bit counters (32..40 supported)");
  if (c.threads_per_core != 1)
    return pmu::Status::refused("NetBurst PMU: " + std::to_string(c.threads_per_core) +
                                " threads per core (only single-threaded is modelled)");
  if (c.pmi_timing != PmiTiming::kNextEventCount && c.pmi_timing != PmiTiming::kAtOverflow)
    return pmu::Status::refused(std::string("NetBurst PMU: unknown PMI timing"));
  return {};
}

namespace {
const Config& checked(const Config& c) {
  if (const pmu::Status s = validate(c); !s.ok()) throw std::invalid_argument(s.reason());
  return c;
}
}  // namespace

NetburstPmu::NetburstPmu(const Config& config, InterruptSink& interrupts)
    : config_(checked(config)),
      interrupts_(interrupts),
      counter_mask_((uint64_t{1} << config.counter_bits) - 1),
      environment_{config.third_level_cache} {
  rebuild_setups();
}

MsrResult NetburstPmu::wrmsr(uint32_t msr, uint64_t value) {
  if (!owns_msr(msr)) return MsrResult::kNotNetburstMsr;
  if (is_counter_msr(msr)) {
    const int n = static_cast<int>(msr - kCounterMsrBase);
    if (!exists(n)) return MsrResult::kGeneralProtection;
    counters_[n] = value & counter_mask_;
    return MsrResult::kOk;
  }
  if (is_cccr_msr(msr)) {
    const int n = static_cast<int>(msr - kCccrMsrBase);
    if (!exists(n) || (value & cccr::kReserved)) return MsrResult::kGeneralProtection;
    cccrs_[n] = value;
    edge_previous_ &= ~(1u << n);
    rebuild_setups();
    return MsrResult::kOk;
  }
  const std::optional<Escr> e = escr_at(msr);
  if (!e || !escr_exists(*e) || (value & escr::kReserved)) return MsrResult::kGeneralProtection;
  escrs_[static_cast<int>(*e)] = value;
  rebuild_setups();
  return MsrResult::kOk;
}

MsrResult NetburstPmu::rdmsr(uint32_t msr, uint64_t& value) const {
  if (!owns_msr(msr)) return MsrResult::kNotNetburstMsr;
  if (is_counter_msr(msr)) {
    const int n = static_cast<int>(msr - kCounterMsrBase);
    if (!exists(n)) return MsrResult::kGeneralProtection;
    value = counters_[n];
    return MsrResult::kOk;
  }
  if (is_cccr_msr(msr)) {
    const int n = static_cast<int>(msr - kCccrMsrBase);
    if (!exists(n)) return MsrResult::kGeneralProtection;
    value = cccrs_[n];
    return MsrResult::kOk;
  }
  const std::optional<Escr> e = escr_at(msr);
  if (!e || !escr_exists(*e)) return MsrResult::kGeneralProtection;
  value = escrs_[static_cast<int>(*e)];
  return MsrResult::kOk;
}

void NetburstPmu::rebuild_setups() {
  enabled_ = 0;
  cascade_ = 0;
  for (int n = 0; n < kMaxCounters; ++n) {
    Setup s;
    if (!exists(n)) {
      setups_[n] = s;
      continue;
    }
    const uint64_t c = cccrs_[n];
    if (c & cccr::kEnable) enabled_ |= 1u << n;
    const int alt = cascade_alternate(n);
    if ((c & cccr::kCascade) && exists(alt)) cascade_ |= 1u << n;
    const std::optional<Escr> e = escr_for(n, cccr::escr_select(c), config_.iq_escrs);
    if (e) {
      const uint64_t v = escrs_[static_cast<int>(*e)];
      const EventInfo* event = find_event(*e, escr::event_select(v));
      if (event && event->modelled() && cccr::active_thread_counts(c)) {
        s.counts = true;
        s.kind = event->kind;
        s.mask = escr::event_mask(v);
        s.os = (v & escr::kT0Os) != 0;
        s.usr = (v & escr::kT0Usr) != 0;
        s.filter.compare = (c & cccr::kCompare) != 0;
        s.filter.complement = (c & cccr::kComplement) != 0;
        s.filter.edge = (c & cccr::kEdge) != 0;
        s.filter.threshold = static_cast<uint8_t>(cccr::threshold(c));
      }
    }
    setups_[n] = s;
  }
}

uint32_t NetburstPmu::counting_mask() const {
  uint32_t live = enabled_;
  for (uint32_t m = cascade_ & ~enabled_; m != 0; m &= m - 1) {
    const int n = std::countr_zero(m);
    if (cccrs_[cascade_alternate(n)] & cccr::kOvf) live |= 1u << n;
  }
  return live;
}

bool NetburstPmu::wants_events() const { return counting_mask() != 0; }

bool NetburstPmu::wants_kernel_events() const {
  for (uint32_t m = counting_mask(); m != 0; m &= m - 1) {
    const Setup& s = setups_[std::countr_zero(m)];
    if (s.counts && (s.os || (s.filter.compare && s.filter.complement))) return true;
  }
  return false;
}

uint64_t NetburstPmu::quiet_retirements() const {
  uint64_t quiet = UINT64_MAX;
  for (uint32_t m = counting_mask(); m != 0; m &= m - 1) {
    const int n = std::countr_zero(m);
    const Setup& s = setups_[n];
    if (!s.counts) continue;
    // An overflow armed for the next increment, or forced on every one.
    if ((pending_pmi_ & (1u << n)) || (cccrs_[n] & cccr::kForceOvf)) return 1;
    // Complement counts the cycles of instructions without the event (one with a cache miss
    // takes many); cycle-based and cache events may add more than one per instruction.
    if (s.filter.compare && s.filter.complement) return 1;
    switch (s.kind) {
      case EventKind::kUnmodelled: break;  // never increments without Complement
      case EventKind::kBranchRetired:
      case EventKind::kMispredBranchRetired:
      case EventKind::kInstrRetired:
        // At most one increment per instruction: the increment that wraps is the room's.
        quiet = std::min(quiet, counter_mask_ - counters_[n] + 1);
        break;
      case EventKind::kGlobalPowerEvents:
      case EventKind::kBsqCacheReference: return 1;
    }
  }
  return quiet;
}

namespace {

// What an unseen CPL-3 instruction adds to a counting counter set up as `s`, when that follows
// from the instruction being one (or a branch) alone.
enum class UnseenCount { kNothing, kPerInstruction, kPerBranch, kNeedsDetail };

template <class Setup>
UnseenCount unseen_count(const Setup& s) {
  // Kernel instructions are not in a batch; Compare judges each cycle's occurrences.
  if (s.os || s.filter.compare) return UnseenCount::kNeedsDetail;
  if (!s.usr) return UnseenCount::kNothing;  // a CPL-3 instruction has no occurrences then
  constexpr uint16_t kAllBranches = mask::kMmnp | mask::kMmnm | mask::kMmtp | mask::kMmtm;
  switch (s.kind) {
    case EventKind::kUnmodelled: return UnseenCount::kNothing;
    case EventKind::kInstrRetired:
      return (s.mask & mask::kNbogusNtag) ? UnseenCount::kPerInstruction : UnseenCount::kNothing;
    case EventKind::kBranchRetired:
      // Some of the four kinds only: which ones a branch is needs its direction and prediction.
      if ((s.mask & kAllBranches) == 0) return UnseenCount::kNothing;
      return (s.mask & kAllBranches) == kAllBranches ? UnseenCount::kPerBranch
                                                     : UnseenCount::kNeedsDetail;
    case EventKind::kMispredBranchRetired:
    case EventKind::kGlobalPowerEvents:
    case EventKind::kBsqCacheReference: return UnseenCount::kNeedsDetail;
  }
  return UnseenCount::kNeedsDetail;
}

}  // namespace

bool NetburstPmu::reads_cache_model() const {
  for (uint32_t m = counting_mask(); m != 0; m &= m - 1) {
    const Setup& s = setups_[std::countr_zero(m)];
    if (s.counts && (s.filter.compare || s.kind == EventKind::kGlobalPowerEvents ||
                     s.kind == EventKind::kBsqCacheReference))
      return true;
  }
  return false;
}

bool NetburstPmu::reads_branch_predictions() const {
  for (uint32_t m = counting_mask(); m != 0; m &= m - 1) {
    const Setup& s = setups_[std::countr_zero(m)];
    if (!s.counts) continue;
    if (s.kind == EventKind::kMispredBranchRetired) return true;
    // A mask with the predicted and the mispredicted bit of a direction unequal.
    const bool not_taken_split = ((s.mask & mask::kMmnp) != 0) != ((s.mask & mask::kMmnm) != 0);
    const bool taken_split = ((s.mask & mask::kMmtp) != 0) != ((s.mask & mask::kMmtm) != 0);
    if (s.kind == EventKind::kBranchRetired && (not_taken_split || taken_split)) return true;
  }
  return false;
}

UnseenAllowance NetburstPmu::unseen_allowance() const {
  UnseenAllowance allowance;
  for (uint32_t m = counting_mask(); m != 0; m &= m - 1) {
    const int n = std::countr_zero(m);
    const Setup& s = setups_[n];
    if (!s.counts) continue;  // never increments
    const UnseenCount count = unseen_count(s);
    if (count == UnseenCount::kNeedsDetail) return UnseenAllowance::none();
    if (count == UnseenCount::kNothing) continue;
    // The increment that shows something: the next one with an armed or forced overflow, else
    // the one that wraps (it sets OVF, may raise the PMI and start counters cascading from it).
    const bool next_shows = (pending_pmi_ & (1u << n)) || (cccrs_[n] & cccr::kForceOvf);
    const uint64_t shows_at = next_shows ? 1 : counter_mask_ - counters_[n] + 1;
    uint64_t& limit =
        count == UnseenCount::kPerInstruction ? allowance.instructions : allowance.branches;
    limit = std::min(limit, shows_at);
  }
  return allowance;
}

uint64_t NetburstPmu::unseen_increments(const Setup& s, const UnseenRetirements& batch) const {
  switch (unseen_count(s)) {
    case UnseenCount::kPerInstruction: return batch.instructions;
    case UnseenCount::kPerBranch: return batch.branches;
    case UnseenCount::kNothing:
    case UnseenCount::kNeedsDetail: break;  // kNeedsDetail: unseen_allowance() admits nothing
  }
  return 0;
}

void NetburstPmu::retire_unseen(const UnseenRetirements& batch) {
  if (!unseen_allowance().admits(batch))
    throw std::logic_error("NetBurst: a batch of unseen instructions past what the PMU allows");
  const uint32_t live = counting_mask();
  if (live == 0) return;
  stats_.instructions += batch.instructions;
  retiring_rip_ = 0;
  retiring_cpl_ = 3;
  for (uint32_t m = live; m != 0; m &= m - 1) {
    const int n = std::countr_zero(m);
    if (setups_[n].counts) advance(n, unseen_increments(setups_[n], batch));
  }
}

void NetburstPmu::retire(const RetiredInstruction& insn) {
  const uint32_t live = counting_mask();  // sampled before this instruction counts
  if (live == 0) return;
  ++stats_.instructions;
  retiring_rip_ = insn.rip;
  retiring_cpl_ = insn.cpl;
  const uint64_t busy_cycles = insn.cycles > 1 ? insn.cycles - 1 : 0;
  for (uint32_t m = live; m != 0; m &= m - 1) {
    const int n = std::countr_zero(m);
    const Setup& s = setups_[n];
    if (!s.counts) continue;
    const bool qualified = insn.cpl == 0 ? s.os : s.usr;
    CycleInput in;
    if (qualified) in = event_input(s.kind, s.mask, insn, environment_);
    bool previous = (edge_previous_ >> n) & 1;
    const uint64_t increments = filtered_increments(
        s.filter, FilterInput{busy_cycles, in.busy_value, in.retire_value}, previous);
    edge_previous_ = (edge_previous_ & ~(1u << n)) | (previous ? 1u << n : 0u);
    advance(n, increments);
  }
}

void NetburstPmu::advance(int n, uint64_t increments) {
  if (increments == 0) return;
  const uint32_t bit = 1u << n;
  uint64_t& c = cccrs_[n];
  bool raise = false;

  // An overflow armed earlier: this update's first increment is its "next event count".
  if (pending_pmi_ & bit) {
    pending_pmi_ &= ~bit;
    if (c & cccr::kOvfPmiT0) raise = true;
  }

  const uint64_t value = counters_[n];
  const uint64_t room = counter_mask_ - value + 1;  // the increment that wraps the counter
  const bool wrapped = increments >= room;
  const bool forced = (c & cccr::kForceOvf) != 0;
  counters_[n] = (value + increments) & counter_mask_;

  if (wrapped || forced) {
    c |= cccr::kOvf;  // may start counters that cascade from this one (counting_mask())
    ++stats_.overflows;
    if (c & cccr::kOvfPmiT0) {
      if (config_.pmi_timing == PmiTiming::kAtOverflow) {
        raise = true;
      } else {
        // Overflows happen at increment `first` (1 when forced, else `room`) and, when forced,
        // at every later one; each is followed by the next increment.
        const uint64_t first = forced ? 1 : room;
        if (first < increments) raise = true;
        const bool last_is_overflow = forced || room == increments;
        if (last_is_overflow) pending_pmi_ |= bit;
      }
    }
  }

  if (raise) {
    ++stats_.pmis;
    interrupts_.raise_performance_interrupt();
    if (pmi_observer_) pmi_observer_(n, retiring_rip_, retiring_cpl_);
  }
}

PmuState NetburstPmu::state() const {
  PmuState s;
  s.counter_count = static_cast<uint8_t>(config_.counters);
  s.counter_bits = static_cast<uint8_t>(config_.counter_bits);
  for (int n = 0; n < kMaxCounters; ++n) {
    s.counters[n] = counters_[n];
    s.cccrs[n] = static_cast<uint32_t>(cccrs_[n]);
  }
  for (int i = 0; i < kEscrCount; ++i) s.escrs[i] = static_cast<uint32_t>(escrs_[i]);
  s.pending_pmi = pending_pmi_;
  s.edge_previous = edge_previous_;
  return s;
}

pmu::Status NetburstPmu::load_state(const PmuState& s) {
  if (s.counter_count > kMaxCounters)
    return pmu::Status::refused("NetBurst state has " + std::to_string(s.counter_count) +
                                " counters (at most 18)");
  // Counters the state has and this PMU lacks must be idle and zero.
  for (int n = static_cast<int>(config_.counters); n < s.counter_count; ++n)
    if (s.counters[n] != 0 || s.cccrs[n] != 0)
      return pmu::Status::refused("NetBurst state uses counter " + std::to_string(n) +
                                  " but this CPU has " + std::to_string(config_.counters) +
                                  " counters");
  const uint32_t live = (config_.counters >= 32) ? ~0u : ((1u << config_.counters) - 1u);
  const uint32_t in_state = s.counter_count == 0 ? 0u : ((1u << s.counter_count) - 1u);
  if ((s.pending_pmi | s.edge_previous) & ~(live & in_state))
    return pmu::Status::refused(
        std::string("NetBurst state flags counters that do not exist here"));
  for (int n = 0; n < s.counter_count && n < static_cast<int>(config_.counters); ++n) {
    if (s.counters[n] & ~counter_mask_)
      return pmu::Status::refused("NetBurst state: counter " + std::to_string(n) +
                                  " does not fit " + std::to_string(config_.counter_bits) +
                                  " bits");
    if (s.cccrs[n] & cccr::kReserved)
      return pmu::Status::refused("NetBurst state: CCCR " + std::to_string(n) +
                                  " has reserved bits set");
  }
  for (int i = 0; i < kEscrCount; ++i) {
    const Escr e = static_cast<Escr>(i);
    if (s.escrs[i] & escr::kReserved)
      return pmu::Status::refused("NetBurst state: " + std::string(escr_name(e)) +
                                  " has reserved bits set");
    if (s.escrs[i] != 0 && !escr_exists(e))
      return pmu::Status::refused("NetBurst state uses " + std::string(escr_name(e)) +
                                  ", which this CPU model lacks");
  }
  counters_.fill(0);
  cccrs_.fill(0);
  for (int n = 0; n < s.counter_count && n < static_cast<int>(config_.counters); ++n) {
    counters_[n] = s.counters[n];
    cccrs_[n] = s.cccrs[n];
  }
  for (int i = 0; i < kEscrCount; ++i) escrs_[i] = s.escrs[i];
  pending_pmi_ = s.pending_pmi;
  edge_previous_ = s.edge_previous;
  rebuild_setups();
  return {};
}

void NetburstPmu::reset() {
  counters_.fill(0);
  cccrs_.fill(0);
  escrs_.fill(0);
  pending_pmi_ = 0;
  edge_previous_ = 0;
  rebuild_setups();
}

CounterView NetburstPmu::counter_view(int n) const {
  CounterView v;
  if (!exists(n)) return v;
  v.exists = true;
  v.counting = (counting_mask() >> n) & 1;
  v.escr = escr_for(n, cccr::escr_select(cccrs_[n]), config_.iq_escrs);
  if (v.escr) v.event = find_event(*v.escr, escr::event_select(escrs_[static_cast<int>(*v.escr)]));
  v.counts_events = setups_[n].counts;
  return v;
}

}  // namespace pmu::netburst
