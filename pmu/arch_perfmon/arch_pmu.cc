#include "pmu/arch_perfmon/arch_pmu.h"

#include <algorithm>
#include <optional>
#include <bit>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

namespace pmu::arch_perfmon {
namespace {

// The kind of unseen retirement an event counts one of per retirement (UnseenRetirements and
// UnseenAllowance name the kinds alike); nullopt for an event that needs each instruction.
struct UnseenKind {
  uint64_t UnseenRetirements::*count;
  uint64_t UnseenAllowance::*limit;
};
std::optional<UnseenKind> unseen_kind(Event e) {
  switch (e) {
    case Event::kInstructions:
      return UnseenKind{&UnseenRetirements::instructions, &UnseenAllowance::instructions};
    case Event::kBranches:
      return UnseenKind{&UnseenRetirements::branches, &UnseenAllowance::branches};
    case Event::kConditionalBranches:
      return UnseenKind{&UnseenRetirements::conditional_branches,
                        &UnseenAllowance::conditional_branches};
    default: return std::nullopt;
  }
}

pmu::Status range_error(const char* what, uint32_t value, const char* range) {
  return pmu::Status::refused("architectural PMU: " + std::to_string(value) + " " + what + " (" +
                              range + " supported)");
}

// Whether `msr` is one of the `count` registers from `first` on.
bool in_block(uint32_t msr, uint32_t first, uint32_t count) {
  return msr >= first && msr < first + count;
}

uint64_t low_bits(uint32_t n) { return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1; }

// A 48-bit linear address: bits 63:47 all equal.
bool canonical(uint64_t address) {
  return static_cast<uint64_t>(static_cast<int64_t>(address << 16) >> 16) == address;
}

// One counter's CMASK/INV/EDGE (SDM "IA32_PERFEVTSELx"), per cycle of an instruction.
struct CycleFilter {
  uint8_t cmask = 0;
  bool invert = false;
  bool edge = false;
  bool passes(uint32_t occurrences) const {
    const bool at_least = occurrences >= cmask;
    return invert ? !at_least : at_least;
  }
};

// Increments for an instruction of `cycles` cycles: `busy_value` occurrences in each cycle but
// the last, `retire_value` in the last. `previous`: the comparison in the cycle before.
uint64_t filtered(const CycleFilter& f, uint64_t cycles, uint32_t busy_value, uint32_t retire_value,
                  bool& previous) {
  const uint64_t busy = cycles - 1;
  if (f.cmask == 0) return busy * busy_value + retire_value;
  uint64_t n = 0;
  if (busy > 0) {
    const bool b = f.passes(busy_value);
    n += f.edge ? (b && !previous ? 1 : 0) : (b ? busy : 0);
    previous = b;
  }
  const bool r = f.passes(retire_value);
  n += f.edge ? (r && !previous ? 1 : 0) : (r ? 1 : 0);
  previous = r;
  return n;
}

}  // namespace

pmu::Status validate(const Config& c) {
  if (c.version < 2 || c.version > 4) return range_error("as version", c.version, "2..4");
  if (c.counters < 1 || c.counters > kMaxCounters)
    return range_error("general-purpose counters", c.counters, "1..8");
  if (c.counter_bits < 32 || c.counter_bits > 48)
    return range_error("bits per counter", c.counter_bits, "32..48");
  if (c.fixed_counters > kMaxFixedCounters)
    return range_error("fixed counters", c.fixed_counters, "0..3");
  if (c.fixed_counter_bits < 32 || c.fixed_counter_bits > 48)
    return range_error("bits per fixed counter", c.fixed_counter_bits, "32..48");
  return {};
}

ArchPmu::ArchPmu(const Config& config, InterruptSink& interrupts, PebsMachine* pebs)
    : config_(config), interrupts_(interrupts), pebs_(pebs), state_(), lbr_(state_.lbr) {
  if (const pmu::Status s = validate(config); !s.ok()) throw std::invalid_argument(s.reason());
  if (config.pebs && pebs == nullptr)
    throw std::invalid_argument("architectural PMU: PEBS needs a machine to write its records");
  reset();
}

bool ArchPmu::owns_msr(uint32_t msr) {
  auto in = [msr](uint32_t first, uint32_t count) { return in_block(msr, first, count); };
  return in(kMsrPmc0, kMaxCounters) || in(kMsrPerfEvtSel0, kMaxCounters) ||
         in(kMsrFixedCtr0, kMaxFixedCounters) || msr == kMsrPerfCapabilities ||
         (msr >= kMsrFixedCtrCtrl && msr <= kMsrGlobalInuse) ||
         in(kMsrFullWidthPmc0, kMaxCounters) || msr == kMsrPebsEnable || msr == kMsrDsArea ||
         msr == kMsrPebsLdLatThreshold || LastBranchRecords::owns_msr(msr);
}

uint64_t ArchPmu::perf_capabilities() const {
  uint64_t caps = config_.full_width_writes ? capabilities::kFullWidthWrite : 0;
  if (config_.pebs)
    caps |= capabilities::kPebsFormat3 | capabilities::kPebsArchRegs | capabilities::kPebsTrap;
  if (config_.lbr) caps |= kLbrFormatInfo;
  return caps;
}

uint64_t ArchPmu::pebs_counter_bits() const {
  return config_.pebs ? low_bits(std::min(config_.counters, kMaxPebsCounters)) : 0;
}

bool ArchPmu::samples_by_pebs(const Active& c) const {
  return !c.fixed && (state_.pebs_enable & pebs_counter_bits() & c.status_bit);
}

uint64_t ArchPmu::pebs_enable_writable() const {
  return pebs_counter_bits() | (pebs_counter_bits() << kPebsLoadLatencyShift);
}

uint64_t ArchPmu::global_enable_bits() const {
  return low_bits(config_.counters) | (low_bits(config_.fixed_counters) << global::kFixedShift);
}

uint64_t ArchPmu::status_bits() const {
  uint64_t bits = global_enable_bits() | global::kOvfBuffer | global::kCondChanged;
  if (config_.version >= 4) bits |= global::kLbrFrozen | global::kCountersFrozen;
  return bits;
}

uint64_t ArchPmu::evtsel_reserved() const {
  uint64_t reserved = ~uint64_t{0} << 32;
  if (config_.version < 3) reserved |= evtsel::kAnyThread;
  return reserved;
}

uint64_t ArchPmu::fixed_ctrl_reserved() const {
  uint64_t field = fixed_ctrl::kOs | fixed_ctrl::kUsr | fixed_ctrl::kPmi;
  if (config_.version >= 3) field |= fixed_ctrl::kAnyThread;
  uint64_t allowed = 0;
  for (uint32_t i = 0; i < config_.fixed_counters; ++i)
    allowed |= field << (fixed_ctrl::kBitsPerCounter * i);
  return ~allowed;
}

ArchPmu::BankRegister ArchPmu::bank_register(uint32_t msr) const {
  auto in = [msr](uint32_t first, uint32_t count) { return in_block(msr, first, count); };
  if (in(kMsrPmc0, kMaxCounters))
    return {Bank::kPmc, msr - kMsrPmc0, msr - kMsrPmc0 < config_.counters};
  if (in(kMsrFullWidthPmc0, kMaxCounters))
    return {Bank::kFullWidthPmc, msr - kMsrFullWidthPmc0,
            config_.full_width_writes && msr - kMsrFullWidthPmc0 < config_.counters};
  if (in(kMsrPerfEvtSel0, kMaxCounters))
    return {Bank::kEventSelect, msr - kMsrPerfEvtSel0, msr - kMsrPerfEvtSel0 < config_.counters};
  if (in(kMsrFixedCtr0, kMaxFixedCounters))
    return {Bank::kFixed, msr - kMsrFixedCtr0, msr - kMsrFixedCtr0 < config_.fixed_counters};
  return {};
}

MsrResult ArchPmu::wrmsr(uint32_t msr, uint64_t value) {
  if (!owns_msr(msr)) return MsrResult::kNotArchPerfmonMsr;
  constexpr MsrResult kGp = MsrResult::kGeneralProtection;
  if (LastBranchRecords::owns_msr(msr))
    return config_.lbr && lbr_.wrmsr(msr, value) ? MsrResult::kOk : kGp;
  const BankRegister r = bank_register(msr);
  if (r.bank != Bank::kNone && !r.exists) return kGp;
  switch (r.bank) {
    case Bank::kPmc: {
      // Bits 31:0, sign-extended: a 32-bit write of -N presets the whole counter to -N.
      const uint64_t extended = static_cast<uint64_t>(
          static_cast<int64_t>(static_cast<int32_t>(static_cast<uint32_t>(value))));
      state_.pmc[r.index] = extended & counter_mask();
      return MsrResult::kOk;
    }
    case Bank::kFullWidthPmc:
      if (value & ~counter_mask()) return kGp;
      state_.pmc[r.index] = value;
      return MsrResult::kOk;
    case Bank::kEventSelect:
      if (value & evtsel_reserved()) return kGp;
      state_.evtsel[r.index] = value;
      state_.edge_previous &= ~(uint32_t{1} << r.index);
      return MsrResult::kOk;
    case Bank::kFixed: state_.fixed[r.index] = value & fixed_mask(); return MsrResult::kOk;
    case Bank::kNone: break;
  }
  switch (msr) {
    case kMsrFixedCtrCtrl:
      if (value & fixed_ctrl_reserved()) return kGp;
      state_.fixed_ctrl = value;
      return MsrResult::kOk;
    case kMsrGlobalCtrl:
      if (value & ~global_enable_bits()) return kGp;
      state_.global_ctrl = value;
      return MsrResult::kOk;
    case kMsrGlobalStatusReset:
      if (value & ~status_bits()) return kGp;
      state_.global_status &= ~value;
      return MsrResult::kOk;
    case kMsrGlobalStatusSet:
      if (config_.version < 4 || (value & ~(status_bits() & ~global::kCondChanged))) return kGp;
      state_.global_status |= value;
      return MsrResult::kOk;
    case kMsrPebsEnable:
      if (!config_.pebs || (value & ~pebs_enable_writable())) return kGp;
      state_.pebs_enable = value;
      return MsrResult::kOk;
    case kMsrDsArea:
      if (!config_.pebs || !canonical(value)) return kGp;
      state_.ds_area = value;
      return MsrResult::kOk;
    case kMsrPebsLdLatThreshold:
      if (!config_.pebs || (value & ~kLdLatThresholdMask)) return kGp;
      state_.ld_lat_threshold = value;
      return MsrResult::kOk;
    case kMsrGlobalStatus:
    case kMsrGlobalInuse:
    case kMsrPerfCapabilities:
    default: return kGp;  // read-only, or a hole of the block (0x30C..)
  }
}

MsrResult ArchPmu::rdmsr(uint32_t msr, uint64_t& value) const {
  if (!owns_msr(msr)) return MsrResult::kNotArchPerfmonMsr;
  constexpr MsrResult kGp = MsrResult::kGeneralProtection;
  if (LastBranchRecords::owns_msr(msr)) {
    if (!config_.lbr) return kGp;
    value = lbr_.rdmsr(msr);
    return MsrResult::kOk;
  }
  const BankRegister r = bank_register(msr);
  if (r.bank != Bank::kNone && !r.exists) return kGp;
  switch (r.bank) {
    case Bank::kPmc:
    case Bank::kFullWidthPmc: value = state_.pmc[r.index]; return MsrResult::kOk;
    case Bank::kEventSelect: value = state_.evtsel[r.index]; return MsrResult::kOk;
    case Bank::kFixed: value = state_.fixed[r.index]; return MsrResult::kOk;
    case Bank::kNone: break;
  }
  switch (msr) {
    case kMsrPerfCapabilities: value = perf_capabilities(); return MsrResult::kOk;
    case kMsrFixedCtrCtrl: value = state_.fixed_ctrl; return MsrResult::kOk;
    case kMsrGlobalStatus: value = state_.global_status; return MsrResult::kOk;
    case kMsrGlobalCtrl: value = state_.global_ctrl; return MsrResult::kOk;
    case kMsrGlobalStatusReset: value = 0; return MsrResult::kOk;
    case kMsrPebsEnable:
    case kMsrDsArea:
    case kMsrPebsLdLatThreshold:
      if (!config_.pebs) return kGp;
      value = msr == kMsrPebsEnable ? state_.pebs_enable
              : msr == kMsrDsArea   ? state_.ds_area
                                    : state_.ld_lat_threshold;
      return MsrResult::kOk;
    case kMsrGlobalStatusSet:
      if (config_.version < 4) return kGp;
      value = 0;
      return MsrResult::kOk;
    case kMsrGlobalInuse: {
      if (config_.version < 4) return kGp;
      uint64_t inuse = 0;
      bool any_pmi = false;
      for (uint32_t x = 0; x < config_.counters; ++x) {
        if (state_.evtsel[x] & evtsel::kEventSelect) inuse |= uint64_t{1} << x;
        any_pmi = any_pmi || (state_.evtsel[x] & evtsel::kInt);
      }
      for (uint32_t i = 0; i < config_.fixed_counters; ++i) {
        const uint64_t field = state_.fixed_ctrl >> (fixed_ctrl::kBitsPerCounter * i);
        if (field & (fixed_ctrl::kOs | fixed_ctrl::kUsr))
          inuse |= uint64_t{1} << (global::kFixedShift + i);
        any_pmi = any_pmi || (field & fixed_ctrl::kPmi);
      }
      value = inuse | (any_pmi ? global::kInuseAnyPmi : 0);
      return MsrResult::kOk;
    }
    default: return kGp;
  }
}

template <class F>
void ArchPmu::for_each_active(F&& f) const {
  if (frozen()) return;  // CTR_Frz stops every counter
  for (uint32_t x = 0; x < config_.counters; ++x) {
    const uint64_t sel = state_.evtsel[x];
    if (!(sel & evtsel::kEnable) || !(state_.global_ctrl & (uint64_t{1} << x))) continue;
    f(Active{.fixed = false,
             .index = x,
             .event = decode_event(sel),
             .select = sel,
             .os = (sel & evtsel::kOs) != 0,
             .usr = (sel & evtsel::kUsr) != 0,
             .pmi = (sel & evtsel::kInt) != 0,
             .width_mask = counter_mask(),
             .status_bit = uint64_t{1} << x});
  }
  for (uint32_t i = 0; i < config_.fixed_counters; ++i) {
    const uint64_t field = state_.fixed_ctrl >> (fixed_ctrl::kBitsPerCounter * i);
    const uint64_t bit = uint64_t{1} << (global::kFixedShift + i);
    if (!(field & (fixed_ctrl::kOs | fixed_ctrl::kUsr)) || !(state_.global_ctrl & bit)) continue;
    f(Active{.fixed = true,
             .index = i,
             .event = fixed_counter_event(i),
             .select = 0,
             .os = (field & fixed_ctrl::kOs) != 0,
             .usr = (field & fixed_ctrl::kUsr) != 0,
             .pmi = (field & fixed_ctrl::kPmi) != 0,
             .width_mask = fixed_mask(),
             .status_bit = bit});
  }
}

bool ArchPmu::add(uint64_t& counter, uint64_t increments, uint64_t width_mask) {
  const uint64_t before = counter;
  counter = (before + increments) & width_mask;
  // A wrap: the sum passed 2^width (increments are far below 2^64 - 2^48).
  return increments > width_mask - before;
}

uint64_t ArchPmu::increments(const Active& c, const RetiredInstruction& insn) {
  if (c.event == Event::kUnmodelled) return 0;
  // USR/OS gate the counter itself, not the occurrences: at a level it does not count it
  // stands still, also where INV would let a cycle without occurrences pass.
  const bool qualified = insn.cpl == 0 ? c.os : c.usr;
  if (!qualified) return 0;
  const uint32_t occ = occurrences(c.event, insn, config_.third_level_cache,
                                   static_cast<uint32_t>(state_.ld_lat_threshold));
  const uint64_t cycles = std::max<uint32_t>(insn.cycles, 1);
  // A fixed counter has no select: CMASK 0, so every occurrence counts and no edge state.
  const CycleFilter f{
      static_cast<uint8_t>((c.select & evtsel::kCounterMask) >> evtsel::kCounterMaskShift),
      (c.select & evtsel::kInvert) != 0, (c.select & evtsel::kEdge) != 0};
  const uint32_t edge_bit = c.fixed ? 0 : uint32_t{1} << c.index;
  bool previous = state_.edge_previous & edge_bit;
  const uint64_t n = counts_cycles(c.event) ? filtered(f, cycles, occ, occ, previous)
                                            : filtered(f, cycles, 0, occ, previous);
  state_.edge_previous =
      previous ? state_.edge_previous | edge_bit : state_.edge_previous & ~edge_bit;
  return n;
}

void ArchPmu::raise_pmi(uint64_t raised_by, uint64_t rip, uint8_t cpl) {
  if (state_.debugctl & debugctl::kFreezePerfmonOnPmi) {
    if (config_.version >= 4)
      state_.global_status |= global::kCountersFrozen;
    else
      state_.global_ctrl = 0;  // the legacy freeze: software sets it again
  }
  if (state_.debugctl & debugctl::kFreezeLbrsOnPmi) {
    if (config_.version >= 4)
      state_.global_status |= global::kLbrFrozen;
    else
      state_.debugctl &= ~debugctl::kLbr;  // the legacy freeze: software sets it again
  }
  ++stats_.pmis;
  interrupts_.raise_performance_interrupt();
  if (pmi_observer_) pmi_observer_(std::countr_zero(raised_by), rip, cpl);
}

void ArchPmu::retire(const RetiredInstruction& insn) {
  // The branch is recorded before its own PMI can freeze the records.
  if (lbr_recording()) lbr_.retire(insn);
  // Every counter's increments come from the state before the instruction: a freeze its PMI
  // causes applies from the next instruction on.
  std::array<Active, kMaxCounters + kMaxFixedCounters> active;
  std::array<uint64_t, kMaxCounters + kMaxFixedCounters> added{};
  size_t n = 0;
  for_each_active([&](const Active& c) {
    active[n] = c;
    added[n++] = increments(c, insn);
  });
  if (n == 0) return;
  ++stats_.instructions;
  uint64_t pmi = 0;  // the status bits that raise one
  uint64_t pebs_wrapped = 0;
  for (size_t k = 0; k < n; ++k)
    if (added[k] && add(value_of(active[k]), added[k], active[k].width_mask)) {
      ++stats_.overflows;
      if (samples_by_pebs(active[k])) {
        pebs_wrapped |= active[k].status_bit;  // its assist reports it, not GLOBAL_STATUS
        continue;
      }
      state_.global_status |= active[k].status_bit;
      if (active[k].pmi) pmi |= active[k].status_bit;
    }
  if (pebs_wrapped && pebs_assist(insn, pebs_wrapped)) pmi |= global::kOvfBuffer;
  if (pmi) raise_pmi(pmi, insn.rip, insn.cpl);
}

PebsMemoryInfo ArchPmu::memory_info(const RetiredInstruction& insn, uint64_t applicable) const {
  bool latency = false, loads = false, stores = false;
  for (uint32_t x = 0; x < kMaxPebsCounters; ++x) {
    if (!(applicable & (uint64_t{1} << x))) continue;
    const Event e = decode_event(state_.evtsel[x]);
    latency = latency || e == Event::kLoadLatency;
    loads = loads || e == Event::kMemoryLoads;
    stores = stores || e == Event::kMemoryStores;
  }
  if (latency) return load_latency_info(insn);
  if (loads) return {.data_address = insn.load_address};
  if (stores)
    return {.data_address = insn.store_address, .data_source = insn.store_hit_l1 ? 1u : 0u};
  return {};
}

bool ArchPmu::pebs_assist(const RetiredInstruction& insn, uint64_t applicable) {
  GuestMemory& memory = pebs_->supervisor_memory();
  auto read_u64 = [&](uint64_t address, uint64_t& value) {
    return memory.read(address, std::as_writable_bytes(std::span(&value, 1)));
  };
  const uint64_t ds = state_.ds_area;
  // A DS area whose fields would wrap past 2^64 (a guest's choice: DS_AREA only has to be
  // canonical) is unreachable like an unmapped one.
  const bool reachable = ds <= UINT64_MAX - (ds::kPebsCounterReset + 8 * kMaxPebsCounters);
  uint64_t index = 0, maximum = 0, threshold = 0;
  bool written = false;
  if (reachable && read_u64(ds + ds::kPebsIndex, index) &&
      read_u64(ds + ds::kPebsAbsoluteMaximum, maximum) &&
      read_u64(ds + ds::kPebsInterruptThreshold, threshold) && index <= maximum &&
      maximum - index >= kPebsRecordSize) {
    const auto record =
        pebs_record(pebs_->registers_after(), applicable, insn.rip, memory_info(insn, applicable));
    const uint64_t next = index + kPebsRecordSize;
    written = memory.write(index, record) &&
              memory.write(ds + ds::kPebsIndex, std::as_bytes(std::span(&next, 1)));
    index = next;
  }
  // Each counter starts again from its reset value, whether or not a record was written.
  for (uint32_t x = 0; x < kMaxPebsCounters; ++x) {
    if (!(applicable & (uint64_t{1} << x))) continue;
    uint64_t reset = 0;
    if (!reachable || !read_u64(ds + ds::kPebsCounterReset + 8 * x, reset)) reset = 0;
    state_.pmc[x] = reset & counter_mask();
  }
  if (!written) {
    ++stats_.pebs_dropped;
    return false;
  }
  ++stats_.pebs_records;
  if (index < threshold) return false;
  state_.global_status |= global::kOvfBuffer;
  return true;
}

bool ArchPmu::wants_events() const {
  if (lbr_recording() && (lbr_.records_user() || lbr_.records_kernel())) return true;
  bool wants = false;
  for_each_active([&](const Active& c) { wants = wants || c.event != Event::kUnmodelled; });
  return wants;
}

bool ArchPmu::wants_kernel_events() const {
  if (lbr_recording() && lbr_.records_kernel()) return true;
  bool wants = false;
  for_each_active(
      [&](const Active& c) { wants = wants || (c.event != Event::kUnmodelled && c.os); });
  return wants;
}

uint64_t ArchPmu::remaining_to_wrap(uint64_t value, uint64_t width_mask) {
  return width_mask - value + 1;
}

uint64_t ArchPmu::quiet_retirements() const {
  uint64_t quiet = UINT64_MAX;
  for_each_active([&](const Active& c) {
    if (c.event == Event::kUnmodelled) return;
    // At most one occurrence per instruction and no per-cycle filter: the counter wraps on its
    // remaining-th event at the earliest, an instruction that retires last in the run.
    const bool one_per_instruction = !counts_cycles(c.event) && c.event != Event::kLlcReferences &&
                                     c.event != Event::kLlcMisses &&
                                     !(c.select & evtsel::kCounterMask);
    quiet = std::min(
        quiet, one_per_instruction ? remaining_to_wrap(value_of(c), c.width_mask) : uint64_t{1});
  });
  return std::max<uint64_t>(quiet, 1);
}

UnseenAllowance ArchPmu::unseen_allowance() const {
  if (lbr_recording()) return UnseenAllowance::none();  // every branch must be seen
  UnseenAllowance allowed;
  bool possible = true;
  const uint64_t filters = evtsel::kCounterMask | evtsel::kInvert | evtsel::kEdge;
  for_each_active([&](const Active& c) {
    if (c.event == Event::kUnmodelled) return;
    if (c.os || (c.select & filters)) possible = false;
    if (!possible || !c.usr) return;  // without USR it counts nothing unseen
    const std::optional<UnseenKind> kind = unseen_kind(c.event);
    if (!kind) {
      possible = false;
      return;
    }
    uint64_t& limit = allowed.*kind->limit;
    limit = std::min(limit, remaining_to_wrap(value_of(c), c.width_mask));
  });
  return possible ? allowed : UnseenAllowance::none();
}

void ArchPmu::retire_unseen(const UnseenRetirements& batch) {
  if (!unseen_allowance().admits(batch))
    throw std::logic_error("architectural PMU: a batch of unseen instructions it did not admit");
  if (batch.empty()) return;
  bool any = false;
  for_each_active([&](const Active& c) {
    if (!c.usr) return;
    const std::optional<UnseenKind> kind = unseen_kind(c.event);
    const uint64_t n = kind ? batch.*kind->count : 0;
    any = any || c.event != Event::kUnmodelled;
    add(value_of(c), n, c.width_mask);  // admitted: no wrap
  });
  if (any) stats_.instructions += batch.instructions;
}

bool ArchPmu::reads_cache_model() const {
  bool reads = false;
  for_each_active([&](const Active& c) {
    // A store's PEBS record says whether it hit the L1 (RetiredInstruction::store_hit_l1).
    const bool store_record = c.event == Event::kMemoryStores && samples_by_pebs(c);
    reads = reads || arch_perfmon::reads_cache_model(c.event) || store_record;
  });
  return reads;
}

bool ArchPmu::reads_branch_predictions() const {
  if (lbr_recording()) return true;  // LBR_INFO's MISPRED
  bool reads = false;
  for_each_active(
      [&](const Active& c) { reads = reads || arch_perfmon::reads_branch_predictions(c.event); });
  return reads;
}

pmu::Status ArchPmu::load_state(const ArchPmuState& s) {
  auto refuse = [](const std::string& what) {
    return pmu::Status::refused("architectural PMU state: " + what);
  };
  for (uint32_t x = 0; x < kMaxCounters; ++x) {
    const bool exists = x < config_.counters;
    if (!exists && (s.evtsel[x] || s.pmc[x]))
      return refuse("counter " + std::to_string(x) + " set, but the PMU has " +
                    std::to_string(config_.counters));
    if (s.evtsel[x] & evtsel_reserved())
      return refuse("PERFEVTSEL" + std::to_string(x) + " has reserved bits set");
    if (s.pmc[x] & ~counter_mask())
      return refuse("PMC" + std::to_string(x) + " wider than " +
                    std::to_string(config_.counter_bits) + " bits");
  }
  for (uint32_t i = 0; i < kMaxFixedCounters; ++i) {
    if (i >= config_.fixed_counters && s.fixed[i])
      return refuse("fixed counter " + std::to_string(i) + " set, but the PMU has " +
                    std::to_string(config_.fixed_counters));
    if (s.fixed[i] & ~fixed_mask())
      return refuse("FIXED_CTR" + std::to_string(i) + " wider than " +
                    std::to_string(config_.fixed_counter_bits) + " bits");
  }
  if (s.fixed_ctrl & fixed_ctrl_reserved()) return refuse("FIXED_CTR_CTRL has reserved bits set");
  if (s.global_ctrl & ~global_enable_bits()) return refuse("GLOBAL_CTRL has reserved bits set");
  if (s.global_status & ~status_bits()) return refuse("GLOBAL_STATUS has reserved bits set");
  if (s.debugctl & ~debugctl_bits()) return refuse("DEBUGCTL holds bits the PMU does not keep");
  if (!LastBranchRecords::valid(s.lbr)) return refuse("LBR state holds reserved bits");
  if (!config_.lbr && !(s.lbr == LbrState{})) return refuse("LBR state, but the PMU has no LBR");
  if (s.edge_previous & ~static_cast<uint32_t>(low_bits(config_.counters)))
    return refuse("edge state for counters the PMU lacks");
  if (s.pebs_enable & ~pebs_enable_writable())
    return refuse("PEBS_ENABLE has bits set the PMU does not have");
  if (!canonical(s.ds_area) || (!config_.pebs && s.ds_area))
    return refuse("DS_AREA is not a canonical address, or the PMU has no PEBS");
  if ((s.ld_lat_threshold & ~kLdLatThresholdMask) || (!config_.pebs && s.ld_lat_threshold))
    return refuse("the load-latency threshold is wider than 16 bits, or the PMU has no PEBS");
  state_ = s;
  return {};
}

void ArchPmu::reset() {
  state_ = ArchPmuState{};
  state_.global_ctrl = low_bits(config_.counters);
}

}  // namespace pmu::arch_perfmon
