#include "pmu/lwp/lwp_unit.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "pmu/lwp/lwpcb.h"

namespace pmu::lwp {
namespace {

constexpr uint64_t kMsr0FeatureBits =
    msr0::kEnabled | msr0::kIre | msr0::kBre | msr0::kDme | msr0::kInterrupt;

// DESIGN §4.1: with INT set, a vector below 16 would raise an exception vector; #GP instead.
bool interrupt_vector_invalid(uint64_t msr0_value) {
  return (msr0_value & msr0::kInterrupt) &&
         ((msr0_value & msr0::kVectorMask) >> msr0::kVectorShift) < 16;
}

uint64_t slot_counter_address(uint64_t lwpcb, uint32_t slot) {
  return lwpcb + lwpcb::kEventSlots + slot * kLwpcbEventSlotSize + lwpcb::kSlotCounter;
}

// [base, base + size) lies in one canonical half of the 48-bit address space (size > 0).
bool canonical_range(uint64_t base, uint64_t size) {
  auto canonical = [](uint64_t a) {
    return static_cast<uint64_t>(static_cast<int64_t>(a << 16) >> 16) == a;
  };
  const uint64_t last = base + (size - 1);
  return last >= base && canonical(base) && canonical(last) && (base >> 63) == (last >> 63);
}

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%#llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

LwpUnit::LwpUnit(const Capabilities& caps, const UnitConfig& config, GuestMemory& memory,
                 InterruptSink& interrupts, PageFaultSink* page_faults)
    : caps_(caps),
      config_(config),
      memory_(memory),
      interrupts_(interrupts),
      page_faults_(page_faults),
      prng_(config.seed) {}

// ---------------------------------------------------------------------------------------------
// MSR interface (§5.2, DESIGN §4.1)

MsrResult LwpUnit::write_msr(uint32_t msr, uint64_t value, uint8_t cpl) {
  if (!is_lwp_msr(msr)) return MsrResult::kNotLwpMsr;
  if (!caps_.available) return MsrResult::kGeneralProtection;  // the MSRs do not exist
  if (msr == kMsrLwpFeatureEnable) return write_lwpmsr0(value);
  return write_lwpcb(value, cpl);
}

MsrResult LwpUnit::read_msr(uint32_t msr, uint8_t cpl, uint64_t& value) {
  if (!is_lwp_msr(msr)) return MsrResult::kNotLwpMsr;
  if (!caps_.available) return MsrResult::kGeneralProtection;
  if (msr == kMsrLwpFeatureEnable) {
    value = msr0_;
    return MsrResult::kOk;
  }
  // SLWPCB. At CPL 3 the ring-3 entry has happened, so a deferred initialisation is due first.
  if (cpl == 3) enter_user();
  if (lwpcb_ != 0 && pending_ != PendingInit::kLlwpcb) flush();
  value = lwpcb_;
  return MsrResult::kOk;
}

MsrResult LwpUnit::write_lwpmsr0(uint64_t value) {
  if (value & ~msr0::kWritableMask) return MsrResult::kGeneralProtection;
  // Per-feature test against EDX, not a bitwise one (DESIGN §4.1).
  if (value & kMsr0FeatureBits & ~caps_.msr0_allowed()) return MsrResult::kGeneralProtection;
  if (interrupt_vector_invalid(value)) return MsrResult::kGeneralProtection;
  msr0_ = value;
  if (!(value & msr0::kEnabled) && lwpcb_ != 0) disable();  // the OS withdrew LWP
  touch();
  return MsrResult::kOk;
}

MsrResult LwpUnit::write_lwpcb(uint64_t address, uint8_t cpl) {
  if (address == 0) {  // LLWPCB 0: flush and disable (§5.3)
    if (lwpcb_ != 0 && pending_ != PendingInit::kLlwpcb) flush();
    disable();
    return MsrResult::kOk;
  }
  if (!(msr0_ & msr0::kEnabled)) return MsrResult::kGeneralProtection;
  Lwpcb candidate;
  if (!lwpcb_acceptable(address, &candidate)) return MsrResult::kGeneralProtection;
  if (lwpcb_ != 0 && pending_ != PendingInit::kLlwpcb) flush();  // old state into the old LWPCB
  disable();
  lwpcb_ = address;
  pending_ = PendingInit::kLlwpcb;
  touch();
  // Outside ring 3 only the pointer is loaded; the rest waits for the next ring-3 entry (§5.3).
  if (cpl == 3) initialise(PendingInit::kLlwpcb);
  return MsrResult::kOk;
}

bool LwpUnit::lwpcb_acceptable(uint64_t address, Lwpcb* out) {
  if (address % kLwpcbAlignment != 0) return false;
  if (!memory_.user_writable(address, caps_.lwpcb_size())) return false;
  std::optional<Lwpcb> cb = read_lwpcb(memory_, address, caps_.max_events);
  if (!cb) return false;
  if (cb->buffer_size == 0 || cb->buffer_size % kEventRecordSize != 0) return false;
  // The buffer's pages are checked at each store (a #PF trap there), only its range here.
  if (!canonical_range(cb->aligned_buffer_base(), cb->buffer_size)) return false;
  if (cb->head_offset >= cb->buffer_size || cb->head_offset % kEventRecordSize != 0) return false;
  if (cb->tail_offset >= cb->buffer_size || cb->tail_offset % kEventRecordSize != 0) return false;
  *out = std::move(*cb);
  return true;
}

// ---------------------------------------------------------------------------------------------
// Initialisation, flush, disable (§5.3, §5.5.2.4, §5.5.3)

void LwpUnit::enter_user() {
  if (lwpcb_ != 0 && pending_ != PendingInit::kNone) initialise(pending_);
}

void LwpUnit::initialise(PendingInit kind) {
  Lwpcb cb;
  const bool restoring = kind == PendingInit::kRestore;
  if (!(msr0_ & msr0::kEnabled) || !lwpcb_acceptable(lwpcb_, &cb) ||
      (restoring && (head_ >= cb.buffer_size || head_ % kEventRecordSize != 0))) {
    ++stats_.init_faults;
    disable();
    return;
  }
  buffer_base_ = cb.aligned_buffer_base();
  buffer_size_ = cb.buffer_size;
  random_bits_ = cb.random_bits;
  threshold_ = cb.threshold;
  filters_ = cb.filters;
  cached_tail_ = cb.tail_offset;
  if (!restoring) head_ = cb.head_offset;

  uint64_t claimed_ids = 0;  // EventIds are 6 bits: one bit each
  uint32_t flags = 0;
  for (uint32_t i = 0; i < caps_.max_events; ++i) {
    const EventSlot& in = cb.slots[i];
    Slot& s = slots_[i];
    const uint32_t saved_counter = restoring && i < restored_slots_ ? s.counter : in.counter;
    s = Slot{in.event_id, in.interval, 0, false};
    if (in.event_id == kEventInvalid || (claimed_ids >> in.event_id & 1)) continue;
    claimed_ids |= uint64_t{1} << in.event_id;  // the earliest selector owns the id (§5.3)
    if (!caps_.event_available(in.event_id) || !(msr0_ >> in.event_id & 1) || in.interval == 0)
      continue;
    // A restored slot keeps the saved unit's verdict: one that was off stays off, even if
    // LWPMSR0 now enables its event (LWPMSR0 changes apply at the next LLWPCB only).
    if (restoring && i < restored_slots_ && !(restored_active_ >> i & 1)) continue;
    s.active = true;
    flags |= lwpcb::flag_for_event(in.event_id);
    const bool reload = (!restoring && saved_counter == 0) || (restoring && i >= restored_slots_) ||
                        saved_counter > (s.interval | random_mask());
    s.counter = reload ? reload_value(s) : saved_counter;
  }
  pending_ = PendingInit::kNone;
  touch();
  if (flags == 0) {  // nothing to count: Flags 0, LWP off, SLWPCB returns 0 (§5.3)
    if (!restoring) write_u32(memory_, lwpcb_ + lwpcb::kFlags, 0);
    disable();
    return;
  }
  interrupt_enabled_ = (msr0_ & msr0::kInterrupt) && caps_.interrupt && threshold_ != 0;
  flags |= lwpcb::kFlagEnabled | (interrupt_enabled_ ? lwpcb::kFlagInterrupt : 0);
  if (!restoring) write_u32(memory_, lwpcb_ + lwpcb::kFlags, flags);
}

// Writes the volatile state into the LWPCB. While a restore is pending (§5.5.2.4) the restored
// head and counters are authoritative and the save area says which slots are active, so the flush
// writes them without reading the LWPCB; only the owed MissedEvents increment (a read-modify-
// write) waits for ring 3.
void LwpUnit::flush() {
  const bool restoring = pending_ == PendingInit::kRestore;
  write_u32(memory_, lwpcb_ + lwpcb::kBufferHeadOffset, head_);
  for (uint32_t i = 0; i < caps_.max_events; ++i) {
    const bool active = restoring ? (restored_active_ >> i & 1) : slots_[i].active;
    if (active) write_u32(memory_, slot_counter_address(lwpcb_, i), slots_[i].counter);
  }
  if (!restoring && missed_pending_ && increment_missed_events(0)) missed_pending_ = false;
}

void LwpUnit::disable() {
  lwpcb_ = 0;
  pending_ = PendingInit::kNone;
  slots_ = {};
  restored_slots_ = 0;
  restored_active_ = 0;
  head_ = cached_tail_ = 0;
  buffer_base_ = 0;
  buffer_size_ = threshold_ = filters_ = 0;
  random_bits_ = 0;
  interrupt_enabled_ = false;
  missed_pending_ = false;
  touch();
}

uint32_t LwpUnit::reload_value(const Slot& slot) {
  uint32_t v = slot.interval;
  if (const uint32_t mask = random_mask(); mask != 0)
    v = (v & ~mask) | (static_cast<uint32_t>(prng_.next()) & mask);
  v &= lwpcb::kIntervalMask;
  return v == 0 ? 1 : v;  // a 0 would read back as "reload" after a flush
}

// ---------------------------------------------------------------------------------------------
// Counting (§3, §4, §5.5.1)

bool LwpUnit::dcache_eligible(const CacheMiss& miss) const {
  const uint32_t latency = reported_latency(miss.latency_cycles, caps_.max_latency());
  if (caps_.cache_latency_filter) {
    if (const uint32_t units = filters_ & lwpcb::kMinLatencyMask; units != 0) {
      if (latency < std::min(units * 16, caps_.max_latency())) return false;
    }
  }
  if (caps_.cache_level_filter && (filters_ & lwpcb::kFilterClf)) {
    uint32_t needed = 0;
    switch (miss.source) {
      case DataSource::kLocalL3: needed = lwpcb::kFilterNbc; break;
      case DataSource::kRemoteCache: needed = lwpcb::kFilterRdc; break;
      case DataSource::kDram: needed = lwpcb::kFilterRam; break;
      case DataSource::kOther: needed = lwpcb::kFilterOth; break;
      case DataSource::kNoValidStatus:
      case DataSource::kL2: return false;
    }
    if (!(filters_ & needed)) return false;
  }
  return true;
}

bool LwpUnit::may_count(uint8_t event_id) const {
  if (lwpcb_ == 0) return false;
  if (pending_ != PendingInit::kNone) return true;  // its events are not known yet
  for (uint32_t i = 0; i < caps_.max_events; ++i)
    if (slots_[i].active && slots_[i].event_id == event_id) return true;
  return false;
}

bool LwpUnit::counts_cache_misses() const { return may_count(kEventDcacheMisses); }

bool LwpUnit::reads_branch_predictions() const {
  return caps_.branch_prediction && may_count(kEventBranchesRetired);
}

uint64_t LwpUnit::quiet_retirements() const {
  if (lwpcb_ == 0) return UINT64_MAX;
  if (pending_ != PendingInit::kNone) return 1;  // the first retirement initialises
  uint64_t quiet = UINT64_MAX;
  for (uint32_t i = 0; i < caps_.max_events; ++i) {
    const Slot& s = slots_[i];
    if (!s.active) continue;
    switch (s.event_id) {
      case kEventInstructionsRetired:
      case kEventBranchesRetired:
        // At most one event per instruction: the counter-th stores the record (0: frozen, the
        // next one does).
        quiet = std::min<uint64_t>(quiet, s.counter == 0 ? 1 : s.counter);
        break;
      case kEventDcacheMisses: {
        // Every instruction may miss up to kMaxCacheMisses times: the counter-th miss may come
        // with instruction ceil(counter / kMaxCacheMisses) at the earliest.
        const uint64_t per = RetiredInstruction::kMaxCacheMisses;
        quiet = std::min<uint64_t>(quiet, s.counter == 0 ? 1 : (s.counter + per - 1) / per);
        break;
      }
    }
  }
  return quiet;
}

UnseenAllowance LwpUnit::unseen_allowance() const {
  if (lwpcb_ == 0) return {};
  if (pending_ != PendingInit::kNone) return UnseenAllowance::none();
  UnseenAllowance allowance;
  for (uint32_t i = 0; i < caps_.max_events; ++i) {
    const Slot& s = slots_[i];
    if (!s.active) continue;
    // The counter-th instruction (branch) stores the record (0: frozen, the next one does).
    const uint64_t shows_at = s.counter == 0 ? 1 : s.counter;
    if (s.event_id == kEventInstructionsRetired) {
      allowance.instructions = std::min(allowance.instructions, shows_at);
    } else if (s.event_id == kEventBranchesRetired && !caps_.branch_prediction &&
               !(filters_ & lwpcb::kFilterNdb)) {
      allowance.branches = std::min(allowance.branches, shows_at);
    } else {
      return UnseenAllowance::none();
    }
  }
  return allowance;
}

void LwpUnit::retire_unseen(const UnseenRetirements& batch) {
  if (!unseen_allowance().admits(batch))
    throw std::logic_error("LWP: a batch of unseen instructions past what the unit allows");
  if (lwpcb_ == 0 || batch.instructions == 0) return;
  for (uint32_t i = 0; i < caps_.max_events; ++i) {
    Slot& s = slots_[i];
    if (!s.active) continue;
    s.counter -= static_cast<uint32_t>(s.event_id == kEventBranchesRetired ? batch.branches
                                                                           : batch.instructions);
  }
  touch();
}

void LwpUnit::retire(const RetiredInstruction& insn) {
  if (insn.cpl != 3 || lwpcb_ == 0) return;  // LWP counts user mode only (§3)
  if (pending_ != PendingInit::kNone) {
    initialise(pending_);
    if (lwpcb_ == 0) return;
  }
  int chosen = -1;
  bool chosen_waited = false;
  int chosen_miss = -1;
  for (uint32_t i = 0; i < caps_.max_events; ++i) {
    Slot& s = slots_[i];
    if (!s.active) continue;
    // The occurrences of this slot's event in the instruction, in order; for DCache misses the
    // index of each eligible miss (a record describes the miss that took the counter to zero).
    std::array<int, RetiredInstruction::kMaxCacheMisses> misses{};
    unsigned n = 0;
    switch (s.event_id) {
      case kEventInstructionsRetired: n = 1; break;
      case kEventBranchesRetired:
        n = insn.is_branch() &&
            !((filters_ & lwpcb::kFilterNdb) && insn.branch.kind == BranchKind::kDirectJump);
        break;
      case kEventDcacheMisses:
        for (int m = 0; m < std::min<int>(insn.cache_miss_count, misses.size()); ++m)
          if (dcache_eligible(insn.cache_misses[m])) misses[n++] = m;
        break;
    }
    if (n == 0) continue;
    const bool waited = s.counter == 0;  // frozen at zero since an earlier instruction
    int miss = misses[0];
    if (!waited) {
      if (s.counter <= n) {
        miss = misses[s.counter - 1];
        s.counter = 0;
      } else {
        s.counter -= n;
        continue;
      }
    }
    if (chosen < 0 || (waited && !chosen_waited)) {
      chosen = static_cast<int>(i);
      chosen_waited = waited;
      chosen_miss = miss;
    }
  }
  touch();
  if (chosen < 0) return;
  Slot& s = slots_[chosen];
  EventRecordBytes record;
  switch (s.event_id) {
    case kEventInstructionsRetired:
      record = encode_instructions_retired(config_.core_id, insn.rip);
      break;
    case kEventBranchesRetired:
      record = encode_branch_retired(config_.core_id, insn.rip, insn.branch);
      break;
    default:
      record = encode_dcache_miss(config_.core_id, insn.rip, insn.cache_misses[chosen_miss],
                                  caps_.data_address, caps_.max_latency());
      break;
  }
  // Reset happens when the record was stored or MissedEvents incremented (§3 Reset); a faulted
  // store leaves the counter at zero for the next occurrence.
  if (store(record) != StoreOutcome::kFault) s.counter = reload_value(s);
}

// ---------------------------------------------------------------------------------------------
// Ring buffer (Table 4, §5.5.3)

LwpUnit::StoreOutcome LwpUnit::store(const EventRecordBytes& record) {
  const uint64_t address = buffer_base_ + head_;
  if (!memory_.write(address, record)) {
    // Nothing was written and nothing below ran: the state is as before the instruction.
    const WriteProbe why = memory_.probe_user_write(address, record.size());
    if (why.fault == WriteFault::kNotPresent || why.fault == WriteFault::kProtection) {
      ++stats_.page_faults;
      const uint32_t code = page_fault::kUser | page_fault::kWrite |
                            (why.fault == WriteFault::kProtection ? page_fault::kPresent : 0);
      if (page_faults_) page_faults_->raise_page_fault(why.address, code);
    } else {
      ++stats_.store_faults;  // unreachable (or changed between write and probe): no #PF
    }
    return StoreOutcome::kFault;
  }
  const uint32_t next = head_ + kEventRecordSize == buffer_size_ ? 0 : head_ + kEventRecordSize;
  // The cached tail can only lag behind software, so "looks full" is checked against memory.
  if (next == cached_tail_) reread_tail();
  if (next == cached_tail_) {
    // Full: the record just written stays the last one and is overwritten next time.
    if (increment_missed_events(1))
      missed_pending_ = false;
    else
      missed_pending_ = true;
    ++stats_.records_missed;
    write_u32(memory_, lwpcb_ + lwpcb::kBufferHeadOffset, head_);
    if (observer_) observer_(StoredRecord{record, address, true});
    return StoreOutcome::kMissed;
  }
  head_ = next;
  ++stats_.records_stored;
  if (observer_) observer_(StoredRecord{record, address, false});
  if (threshold_ != 0) {
    auto used = [this] { return (head_ + buffer_size_ - cached_tail_) % buffer_size_; };
    if (used() >= threshold_) {
      reread_tail();  // the condition appears true: software may have consumed records
      if (used() >= threshold_) {
        write_u32(memory_, lwpcb_ + lwpcb::kBufferHeadOffset, head_);  // show progress
        if (used() == threshold_ && interrupt_enabled_ && (msr0_ & msr0::kInterrupt)) {
          interrupts_.deliver_vector(static_cast<uint8_t>(msr0_ >> msr0::kVectorShift));
          ++stats_.interrupts;
        }
      }
    }
  }
  return StoreOutcome::kStored;
}

bool LwpUnit::reread_tail() {
  ++stats_.tail_rereads;
  uint32_t tail = 0;
  if (!read_u32(memory_, lwpcb_ + lwpcb::kBufferTailOffset, tail)) return false;
  if (tail >= buffer_size_ || tail % kEventRecordSize != 0) return false;  // keep the last good one
  cached_tail_ = tail;
  return true;
}

// Adds `now` plus any increment still owed (the missed-pending bit) to MissedEvents in memory.
bool LwpUnit::increment_missed_events(uint64_t now) {
  const uint64_t address = lwpcb_ + lwpcb::kMissedEvents;
  uint64_t missed = 0;
  if (!read_u64(memory_, address, missed)) return false;
  return write_u64(memory_, address, missed + now + (missed_pending_ ? 1 : 0));
}

// ---------------------------------------------------------------------------------------------
// Save area (§5.5.2)

SaveArea LwpUnit::save() const {
  SaveArea sa;
  sa.lwpcb_address = lwpcb_;
  sa.head_offset = head_;
  sa.counter_count = caps_.max_events;
  for (uint32_t i = 0; i < caps_.max_events; ++i) {
    sa.counters[i] = slots_[i].counter;
    const bool active =
        pending_ == PendingInit::kRestore ? (restored_active_ >> i & 1) : slots_[i].active;
    if (active) sa.active_slots |= 1u << i;
  }
  sa.missed_pending = missed_pending_;
  sa.pending = lwpcb_ == 0 ? PendingInit::kNone : pending_;
  sa.prng_state = prng_.state();
  return sa;
}

void LwpUnit::restore(const SaveArea& area) {
  disable();
  prng_.set_state(area.prng_state);
  if (area.lwpcb_address == 0) return;
  lwpcb_ = area.lwpcb_address;
  head_ = area.head_offset;
  restored_slots_ = std::min<uint32_t>(area.counter_count, caps_.max_events);
  for (uint32_t i = 0; i < restored_slots_; ++i) slots_[i].counter = area.counters[i];
  restored_active_ = area.active_slots & ((1u << restored_slots_) - 1);
  missed_pending_ = area.missed_pending;
  // Nothing is read from the LWPCB before ring 3 (§5.5.2.4). A save taken while an LLWPCB was
  // still pending continues that LLWPCB; otherwise the saved head and counters are kept.
  pending_ = area.pending == PendingInit::kLlwpcb ? PendingInit::kLlwpcb : PendingInit::kRestore;
  touch();
}

UnitState LwpUnit::state() const { return UnitState{msr0_, save()}; }

pmu::Status LwpUnit::load_state(const UnitState& state) {
  if (!caps_.available && state.lwpmsr0 != 0)
    return pmu::Status::refused("LWP state present but this CPU profile has no LWP");
  if (state.lwpmsr0 & ~msr0::kWritableMask)
    return pmu::Status::refused("LWPMSR0 " + hex(state.lwpmsr0) + " has reserved bits set");
  if (state.lwpmsr0 & kMsr0FeatureBits & ~caps_.msr0_allowed())
    return pmu::Status::refused("LWPMSR0 " + hex(state.lwpmsr0) +
                                " enables LWP features this CPU profile lacks (allowed " +
                                hex(caps_.msr0_allowed()) + ")");
  if (interrupt_vector_invalid(state.lwpmsr0))
    return pmu::Status::refused("LWPMSR0 " + hex(state.lwpmsr0) +
                                " has INT with a vector below 16");
  if (state.save_area.counter_count > caps_.max_events)
    return pmu::Status::refused("LWP state has " + std::to_string(state.save_area.counter_count) +
                                " event slots, this CPU profile has " +
                                std::to_string(caps_.max_events));
  msr0_ = state.lwpmsr0;
  restore(state.save_area);
  return {};
}

void LwpUnit::reset() {
  msr0_ = 0;
  disable();
  prng_.set_state(config_.seed);
}

}  // namespace pmu::lwp
