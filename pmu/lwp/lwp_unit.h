// One vCPU's virtual LWP unit (proposal dialect, spec/lwp-proposal-2007.txt §3–5; contracts:
// DESIGN.md §4.1–4.2). VMM-agnostic: it sees guest memory only through GuestMemory (linear
// addresses of the vCPU's current address space), raises interrupts only through InterruptSink
// and page faults only through PageFaultSink, and learns about execution only from a counting
// backend's RetiredInstruction reports.
//
// Choices the proposal leaves open, and what this model does (each is tested):
//  * Validation of a new LWPCB happens at WRMSR LWPMSR1 at any CPL (DESIGN §4.1): misaligned
//    (16 bytes), LWPCB not user-writable, BufferSize 0 or not a multiple of 32, buffer not in
//    the canonical address range (BufferBase and the buffer's last byte, in the same half),
//    BufferHeadOffset/BufferTailOffset not < BufferSize or not a multiple of 32, or LWPMSR0.EN
//    clear -> #GP, and nothing changes. Address 0 is always accepted (disables). The buffer's
//    pages need not be present or writable at LLWPCB: stores fault lazily (below).
//  * At CPL != 3 LLWPCB only loads the pointer; reading counters/head and writing Flags is
//    deferred to the next CPL-3 entry (enter_user() or the first CPL-3 retire()). If the LWPCB
//    became invalid meanwhile, LWP turns off (pointer 0) and stats().init_faults counts it.
//  * Duplicate EventIds: the earliest slot naming an id owns it, even if its interval is 0
//    (then the event is off); later slots with that id are ignored (§5.3).
//  * EventCounter on LLWPCB: 0, or above interval|random-mask, loads from the interval.
//    A counter loaded from the interval gets its low Random bits from the PRNG; a result of 0
//    becomes 1 (a stored 0 would mean "reload" after the next flush). Hence counters are
//    <= interval | (2^Random - 1), which can exceed the interval when Random > 0.
//  * Several counters expiring on one instruction: one record per instruction (§5.5.1). The
//    chosen slot is one that was already waiting at zero before this instruction, else the
//    lowest slot; the others stay frozen at zero and take the next instruction that causes
//    their event ("basic implementation", §3 Gather).
//  * A record store that finds its buffer page not present, read-only or supervisor-only raises
//    a #PF *trap* through PageFaultSink (§5.5.6, second option; DESIGN §4.1): the instruction has
//    retired, CR2 = the record's address, error code U|W, plus P when the page is present. The
//    unit's state does not change (counter frozen at zero, head, MissedEvents and the LWPCB
//    untouched, nothing written), so the next instruction causing the event stores the record
//    (or faults again). stats().page_faults counts these. A full buffer faults the same way: the
//    overwrite of the last record comes first, and MissedEvents is incremented only after it.
//  * A record store whose address the guest cannot make writable (a paging structure or the
//    page outside guest RAM, a reserved paging combination) raises nothing — no #PF handler
//    could fix it and the VMM never touches memory outside RAM: the record is discarded like a
//    faulted one (counter stays at zero, state unchanged) and stats().store_faults counts it.
//  * Without a PageFaultSink (tests, a VMM that cannot inject) the trap still leaves the state
//    unchanged; only the delivery is missing.
//  * BufferHeadOffset is written to the LWPCB when the threshold condition holds, when the
//    buffer is full, and on every flush (SLWPCB, LLWPCB of another LWPCB) (§5.5.3). The tail is
//    re-read only when the buffer looks full or the threshold condition looks true with the
//    cached tail. A re-read tail that is not < BufferSize or not a multiple of 32 is ignored.
//  * MissedEvents lives in memory (§5.5.3): read-modify-write per miss; if that fails the
//    missed-pending flag of §5.5.2 is set and the increment retried at the next store/flush.
//  * DCache eligibility: with both filters supported and in use, a miss must pass both (AND).
//    Latency is compared after rounding down to 16 and capping. Under CLF, L2 and unknown
//    sources (code 0) are never eligible: no filter bit names them.
//  * LWPMSR0 with INT set and a vector below 16 (an exception vector) is #GP, state unchanged
//    (DESIGN §4.1); without INT the vector field is not checked.
//  * Clearing LWPMSR0.EN turns LWP off without touching memory; other LWPMSR0 changes apply
//    at the next LLWPCB, except INT, which is checked again at each interrupt.
//  * SLWPCB while an LLWPCB initialisation is pending returns the pointer and flushes nothing
//    (the LWPCB still holds the authoritative state). SLWPCB or LLWPCB while a *restore* is
//    pending flushes the restored head and counters — a migrated guest's first task switch must
//    not lose them — without reading the LWPCB: the save area records which slots are active.
//    Only the owed MissedEvents increment (a read-modify-write) waits for ring 3.
//  * A restore (save area, snapshot) re-reads the LWPCB but keeps the saved unit's set of active
//    slots: a slot that was off stays off even if LWPMSR0 now enables its event, since LWPMSR0
//    changes apply at the next LLWPCB only.
//  * LLWPCB/SLWPCB flush the old state into the old LWPCB at whatever CPL they run (§5.3 asks
//    for the flush; a guest kernel switching tasks with WRMSR/RDMSR of LWPMSR1 depends on it).
//    Only *reading* the new LWPCB's state is deferred to ring 3. The LWPCB was user-writable at
//    LLWPCB; a flush (or MissedEvents update, or tail re-read) that finds it gone since is simply
//    skipped and raises no #PF: only ring-buffer stores trap (§5.5.6 names the buffer).
//  * A counter frozen at zero (waiting for its record) is flushed as 0, which the next LLWPCB of
//    that LWPCB reads as "load from the interval": that pending record is dropped, a discarded
//    event occurrence as §3 allows. The §5.5.2 save area (world switch, snapshot) keeps it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "pmu/status.h"
#include "pmu/guest_memory.h"
#include "pmu/interrupt_sink.h"
#include "pmu/page_fault_sink.h"
#include "pmu/lwp/architecture.h"
#include "pmu/lwp/capabilities.h"
#include "pmu/lwp/event_record.h"
#include "pmu/lwp/lwpcb.h"
#include "pmu/lwp/prng.h"
#include "pmu/lwp/save_area.h"
#include "pmu/retired_instruction.h"
#include "pmu/unseen_retirements.h"

namespace pmu::lwp {

enum class MsrResult : uint8_t {
  kOk,
  kGeneralProtection,  // the VMM injects #GP
  kNotLwpMsr,          // not LWPMSR0/1: the caller handles it
};

struct UnitConfig {
  uint8_t core_id = 0;  // record byte 1: the vCPU's APIC ID (DESIGN §4.2)
  uint64_t seed = 0;    // PRNG seed for LWPCB.Random
};

struct UnitStats {
  uint64_t records_stored = 0;  // records that advanced BufferHeadOffset
  uint64_t records_missed = 0;  // MissedEvents increments (buffer full)
  uint64_t interrupts = 0;      // threshold interrupts delivered
  uint64_t page_faults = 0;     // #PF traps raised by record stores (nothing stored)
  uint64_t store_faults = 0;    // records discarded: buffer address unreachable (no #PF)
  uint64_t init_faults = 0;     // deferred initialisations that found a bad LWPCB
  uint64_t tail_rereads = 0;    // reads of BufferTailOffset after LLWPCB
  bool operator==(const UnitStats&) const = default;
};

// One record as the unit wrote it: for traces and reports.
struct StoredRecord {
  EventRecordBytes bytes{};
  uint64_t address = 0;  // linear address the record was written to
  bool missed = false;   // the buffer was full: the record overwrote the last one, MissedEvents+1
};

class LwpUnit {
 public:
  // `page_faults`: where #PF traps of record stores go (may be null: then they are only counted).
  LwpUnit(const Capabilities& caps, const UnitConfig& config, GuestMemory& memory,
          InterruptSink& interrupts, PageFaultSink* page_faults = nullptr);

  static bool is_lwp_msr(uint32_t msr) {
    return msr == kMsrLwpFeatureEnable || msr == kMsrLwpControlBlock;
  }

  // WRMSR/RDMSR of LWPMSR0 (feature enable) and LWPMSR1 (WRMSR = LLWPCB, RDMSR = SLWPCB), executed
  // at privilege level `cpl`. On kGeneralProtection the unit's state is unchanged.
  MsrResult write_msr(uint32_t msr, uint64_t value, uint8_t cpl);
  MsrResult read_msr(uint32_t msr, uint8_t cpl, uint64_t& value);

  // CPUID 0x8000001C as this vCPU sees it now (EAX follows LWPMSR0).
  CpuidLeaf cpuid() const { return cpuid_leaf(caps_, msr0_); }

  // The vCPU is about to execute at CPL 3: completes a deferred LLWPCB or restore (§5.3, §5.5.2.4).
  void enter_user();

  // A counting backend reports one retired instruction. Only CPL-3 instructions count.
  void retire(const RetiredInstruction& insn);

  // How many instructions a backend may retire in one run before reporting them, with no record
  // possible before the last of the run (a block stepper's block, DESIGN §4.7: any instruction
  // may be a branch and miss the cache up to kMaxCacheMisses times). At least 1.
  uint64_t quiet_retirements() const;

  // Host counting (DESIGN §4.11): how many CPL-3 instructions (branches) may retire unseen now,
  // reported afterwards as one batch. InstructionsRetired counts by a number alone, and
  // BranchesRetired where branch records carry no prediction (Capabilities::branch_prediction
  // false) and NDB keeps direct jumps: otherwise a branch record carries the modelled
  // predictor's verdict (PRD, §4.2), which every branch trains, and NDB needs each branch's kind.
  // DCache needs each access. An LWPCB awaiting initialisation needs its first instruction. No
  // LWPCB: anything may.
  UnseenAllowance unseen_allowance() const;
  // The batch retired (unseen_allowance().admits(batch), else std::logic_error): the same state
  // as retire() of each of its instructions.
  void retire_unseen(const UnseenRetirements& batch);

  // True while an LWPCB is loaded (active or awaiting initialisation): the backend must report
  // every CPL-3 instruction. False means the backend may run the guest freely.
  bool wants_events() const { return lwpcb_ != 0; }
  // True while the reported instructions' cache misses can matter: a DCache slot is active, or
  // an LWPCB awaits initialisation (its events are not known before the next retirement). A
  // backend may leave its cache model alone otherwise: state follows what is in use.
  bool counts_cache_misses() const;
  // The same for the branch predictor's verdicts (a BranchesRetired slot's records carry them,
  // unless this implementation captures none: Capabilities::branch_prediction).
  bool reads_branch_predictions() const;

  // World switch (§5.5.2): save() copies the volatile state and touches no memory; restore()
  // loads it and defers everything else to the next CPL-3 entry (§5.5.2.4).
  SaveArea save() const;
  void restore(const SaveArea& area);

  // Snapshot / migration: save() plus LWPMSR0. load_state() checks the state against this unit's
  // capabilities (LWPMSR0 bits, slot count) and is refused with a one-line reason without changing
  // anything when it does not fit.
  UnitState state() const;
  pmu::Status load_state(const UnitState& state);

  // Processor reset: LWPMSR0 = 0, LWP off, PRNG back to the seed. stats() are cumulative over
  // the unit's life (diagnostics), so reset() keeps them.
  void reset();

  uint64_t lwpmsr0() const { return msr0_; }
  uint64_t lwpcb_address() const { return lwpcb_; }
  // Bumped by every change of the volatile state, so a VMM can skip saving unchanged state.
  uint64_t generation() const { return generation_; }
  const UnitStats& stats() const { return stats_; }
  const Capabilities& capabilities() const { return caps_; }

  // The interval of the active event slot with `event_id` in the current LWPCB (0: none): what a
  // record of that event stands for, as a sample's period (vmm/report/perf_data.h).
  uint32_t event_interval(uint8_t event_id) const {
    for (const Slot& s : slots_)
      if (s.active && s.event_id == event_id) return s.interval;
    return 0;
  }

  // Called for every record written to the ring buffer (after the write).
  void set_record_observer(std::function<void(const StoredRecord&)> observer) {
    observer_ = std::move(observer);
  }

 private:
  struct Slot {
    uint8_t event_id = 0;
    uint32_t interval = 0;
    uint32_t counter = 0;
    bool active = false;
  };
  enum class StoreOutcome { kStored, kMissed, kFault };

  MsrResult write_lwpmsr0(uint64_t value);
  MsrResult write_lwpcb(uint64_t address, uint8_t cpl);
  // Checks of DESIGN §4.1 on a candidate LWPCB; reads it but writes nothing.
  bool lwpcb_acceptable(uint64_t address, Lwpcb* out);
  void initialise(PendingInit kind);
  void flush();
  void disable();
  uint32_t reload_value(const Slot& slot);
  uint32_t random_mask() const { return (1u << random_bits_) - 1u; }
  bool dcache_eligible(const CacheMiss& miss) const;
  // An active slot counts `event_id`, or the LWPCB's events are not known yet (pending).
  bool may_count(uint8_t event_id) const;
  StoreOutcome store(const EventRecordBytes& record);
  bool reread_tail();
  bool increment_missed_events(uint64_t now);
  void touch() { ++generation_; }

  const Capabilities caps_;
  const UnitConfig config_;
  GuestMemory& memory_;
  InterruptSink& interrupts_;
  PageFaultSink* page_faults_;
  std::function<void(const StoredRecord&)> observer_;

  uint64_t msr0_ = 0;
  uint64_t lwpcb_ = 0;  // internal LWPCB pointer; 0 = LWP off
  PendingInit pending_ = PendingInit::kNone;
  // Cached from the LWPCB at initialisation (§5.5.3).
  uint64_t buffer_base_ = 0;
  uint32_t buffer_size_ = 0;
  uint8_t random_bits_ = 0;
  uint32_t threshold_ = 0;
  uint32_t filters_ = 0;
  bool interrupt_enabled_ = false;  // Flags.INT
  // Volatile state (§5.5.2).
  uint32_t head_ = 0;
  uint32_t cached_tail_ = 0;
  std::array<Slot, kMaxEventSlots> slots_{};
  uint32_t restored_slots_ = 0;   // slots whose counters came from a restored save area
  uint32_t restored_active_ = 0;  // which of them were active (bit per slot), for flushes
  bool missed_pending_ = false;
  Prng prng_;

  uint64_t generation_ = 0;
  UnitStats stats_;
};

}  // namespace pmu::lwp
