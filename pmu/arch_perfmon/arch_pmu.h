// One vCPU's virtual Intel architectural PMU (SDM vol. 3B ch. 20, versions 2 to 4): up to 8
// general-purpose counters with their IA32_PERFEVTSELx, up to 3 fixed counters, the global
// control, status and overflow MSRs, and overflow PMIs through InterruptSink::
// raise_performance_interrupt() (the LAPIC's LVTPC; the VMM routes mask, delivery mode and
// vector). VMM-agnostic: it learns about execution only from a counting backend's
// RetiredInstruction reports, like the NetBurst and LWP models.
//
// MSR rules (rdmsr/wrmsr; the caller has already checked CPL 0, as the CPU does). owns_msr() is
// the whole block this PMU answers for; inside it, a register the configuration lacks (a counter
// beyond Config::counters, the full-width aliases without Config::full_width_writes, STATUS_SET
// and INUSE before version 4) is #GP on read and write.
//  * IA32_PMCx (0xC1+x): a write takes bits 31:0 sign-extended from bit 31 (so -N fits in a
//    32-bit write) and keeps the low counter_bits; IA32_A_PMCx (0x4C1+x, PERF_CAPABILITIES[13]):
//    the whole value, #GP when a bit above counter_bits is set. Both read the counter. Writing a
//    counter neither sets nor clears its overflow bit and raises nothing.
//  * IA32_FIXED_CTRx: stored modulo 2^fixed_counter_bits (bits above are ignored, as KVM does).
//  * IA32_PERFEVTSELx: bits 63:32 reserved, and AnyThread (21) before version 3: #GP, nothing
//    changes; otherwise stored and read back as written.
//  * IA32_FIXED_CTR_CTRL: four bits per existing fixed counter (OS, USR, AnyThread from version
//    3, PMI); any other bit: #GP.
//  * IA32_PERF_GLOBAL_CTRL: one enable bit per existing counter (GP at 0.., fixed at 32..); any
//    other: #GP. At reset the general-purpose bits are set and the fixed ones clear (the SDM's
//    compatibility with version 1 software, which has no global control).
//  * IA32_PERF_GLOBAL_STATUS: read-only (write: #GP). Bit x: counter x overflowed; 32+i: fixed
//    counter i; 58 LBR_Frz and 59 CTR_Frz (version 4); 62 OvfBuf; 63 CondChgd.
//  * IA32_PERF_GLOBAL_STATUS_RESET (OVF_CTRL): each 1 clears that status bit; a bit that names
//    no status bit of this PMU: #GP. Reads 0.
//  * IA32_PERF_GLOBAL_STATUS_SET (version 4): each 1 sets that status bit (CondChgd cannot be
//    set; #GP like a reserved bit). Setting an overflow bit raises no PMI. Reads 0.
//  * IA32_PERF_GLOBAL_INUSE (version 4): read-only: bit x = PERFEVTSELx[7:0] != 0, bit 32+i =
//    fixed counter i's enable bits (OS|USR) != 0, bit 63 = some INT or fixed PMI bit set.
//  * IA32_PERF_CAPABILITIES: read-only: FW_WRITE (13) with Config::full_width_writes; with
//    Config::pebs PEBS format 3 (11:8), PEBS_ARCH_REG (7) and PEBS_TRAP (6); LBR format (5:0) 5
//    with Config::lbr, else 0 (the LBR MSRs #GP, and Linux, which probes them, does without).
//
// Counting (per retired instruction, retire()):
//  * A general-purpose counter counts while PERFEVTSELx.EN and its GLOBAL_CTRL bit are set, a
//    fixed counter while one of its OS/USR bits and its GLOBAL_CTRL bit are set; neither while
//    GLOBAL_STATUS.CTR_Frz is set. USR qualifies CPL 1-3, OS CPL 0.
//  * The event is events.h's. Each instruction has max(cycles, 1) cycles: a cycles event
//    occurs once in each, any other event only in the last (its retirement). CMASK 0 adds
//    every occurrence; CMASK c > 0 adds one per cycle whose occurrences are >= c (INV: < c),
//    and with EDGE only per cycle where that turns from false to true (the previous cycle's
//    result lives in the counter across instructions, false after its PERFEVTSEL is written).
//    INV and EDGE without CMASK change nothing. PC and AnyThread (one thread per core) are inert.
//  * All increments of one instruction are added at once. The counter wraps modulo its width;
//    a wrap sets its GLOBAL_STATUS bit. With INT (fixed: PMI) set, that instruction's
//    retirement raises the PMI: a counter preset to -N raises it on the N-th event, never
//    before and never after (zero skid). One PMI per instruction, however many counters
//    overflowed in it.
//  * PEBS (Config::pebs, format 3, pebs.h): a general-purpose counter x < 4 with its
//    IA32_PEBS_ENABLE bit set does not report its wrap in GLOBAL_STATUS and raises no PMI of its
//    own (its INT bit is not consulted). The instruction whose event wrapped it gets one record
//    for all such counters (applicable counters = their bits), with its own address as the
//    eventing IP and the registers after it: zero skid, as PEBS with precise distribution
//    promises and this model keeps for every event. The record goes to the DS area's PEBS index,
//    which advances by 0xC8; each such counter is then loaded with its DS counter reset value;
//    an index that reaches the interrupt threshold sets OvfBuf (62) and raises the PMI. A
//    buffer at its absolute maximum, or a DS area or buffer the supervisor cannot read or write,
//    takes no record and raises nothing (Stats::pebs_dropped); the counters still reload.
//    IA32_PEBS_ENABLE: bits 3:0 and the load-latency enables 35:32 for the counters that exist
//    (load-latency events are not modelled: such a counter counts nothing); others #GP.
//    IA32_DS_AREA: a canonical linear address, else #GP. Both #GP without Config::pebs.
//  * LBR (Config::lbr, lbr.h): the 32 last-branch records record while DEBUGCTL.LBR is set and
//    GLOBAL_STATUS.LBR_Frz is clear, before the instruction's own PMI can freeze them. Without
//    Config::lbr their MSRs #GP and PERF_CAPABILITIES' LBR format is 0.
//  * Freeze on PMI (DEBUGCTL, which the VMM owns and passes in set_debugctl()): with
//    FREEZE_PERFMON_ON_PMI a PMI sets CTR_Frz (version 4) or clears GLOBAL_CTRL (versions 2-3);
//    with FREEZE_LBRS_ON_PMI it sets LBR_Frz (version 4) or clears DEBUGCTL.LBR (versions 2-3).
//    Clearing CTR_Frz through STATUS_RESET lets the counters count again.
#pragma once

#include <array>
#include <cstdint>
#include <functional>

#include "pmu/arch_perfmon/events.h"
#include "pmu/arch_perfmon/lbr.h"
#include "pmu/arch_perfmon/msr_map.h"
#include "pmu/arch_perfmon/pebs.h"
#include "pmu/interrupt_sink.h"
#include "pmu/retired_instruction.h"
#include "pmu/status.h"
#include "pmu/unseen_retirements.h"

namespace pmu::arch_perfmon {

enum class MsrResult : uint8_t {
  kOk,
  kGeneralProtection,  // the VMM injects #GP; nothing changed
  kNotArchPerfmonMsr,  // outside owns_msr(): the caller handles it
};

struct Config {
  uint32_t version = 4;                         // CPUID 0xA EAX[7:0]: 2..4
  uint32_t counters = kMaxCounters;             // EAX[15:8]: 1..8
  uint32_t counter_bits = 48;                   // EAX[23:16]: 32..48
  uint32_t fixed_counters = kMaxFixedCounters;  // EDX[4:0]: 0..3
  uint32_t fixed_counter_bits = 48;             // EDX[12:5]: 32..48
  bool full_width_writes = true;                // PERF_CAPABILITIES[13]: IA32_A_PMCx
  bool third_level_cache = true;                // the LLC events' last level is an L3
  bool pebs = false;  // PEBS format 3: IA32_PEBS_ENABLE, IA32_DS_AREA (CPUID DS, DTES64)
  bool lbr = false;   // 32 last-branch records, format 5 (lbr.h)
  bool operator==(const Config&) const = default;
};

// Ok when `config` can be modelled, else refused with why (one line).
pmu::Status validate(const Config& config);

// DEBUGCTL bits the PMU acts on (SDM vol. 3B 17.4.7).
namespace debugctl {
inline constexpr uint64_t kLbr = 1ull << 0;
inline constexpr uint64_t kFreezeLbrsOnPmi = 1ull << 11;
inline constexpr uint64_t kFreezePerfmonOnPmi = 1ull << 12;
}  // namespace debugctl
inline constexpr uint64_t kDebugctlFreezeBits =
    debugctl::kFreezeLbrsOnPmi | debugctl::kFreezePerfmonOnPmi;

// The architectural state, for snapshots and migration (StateWriter/StateReader archive()).
struct ArchPmuState {
  std::array<uint64_t, kMaxCounters> evtsel{};
  std::array<uint64_t, kMaxCounters> pmc{};
  std::array<uint64_t, kMaxFixedCounters> fixed{};
  uint64_t fixed_ctrl = 0;
  uint64_t global_ctrl = 0;
  uint64_t global_status = 0;
  uint64_t debugctl = 0;       // the bits last passed in that the PMU keeps (debugctl_bits())
  uint32_t edge_previous = 0;  // bit x: counter x's CMASK comparison was true in its last cycle
  uint64_t pebs_enable = 0;    // IA32_PEBS_ENABLE
  uint64_t ds_area = 0;        // IA32_DS_AREA
  LbrState lbr;
  uint64_t ld_lat_threshold = 0;  // MSR_PEBS_LD_LAT_THRESHOLD
  bool operator==(const ArchPmuState&) const = default;
  template <class Archive>
  void archive(Archive& a) {
    a(evtsel, pmc, fixed, fixed_ctrl, global_ctrl, global_status, debugctl, edge_previous,
      pebs_enable, ds_area, lbr, ld_lat_threshold);
  }
};
inline constexpr uint16_t kStateVersion = 3;  // 2: PEBS and LBR; 3: the load-latency threshold

struct Stats {
  uint64_t instructions = 0;  // retire() calls that found a counting counter
  uint64_t overflows = 0;
  uint64_t pmis = 0;
  uint64_t pebs_records = 0;
  uint64_t pebs_dropped = 0;  // assists that found no room or no memory for their record
  bool operator==(const Stats&) const = default;
};

class ArchPmu {
 public:
  // `config` must pass validate(), and a PMU with PEBS needs `pebs` to write its records;
  // otherwise the constructor throws std::invalid_argument.
  ArchPmu(const Config& config, InterruptSink& interrupts, PebsMachine* pebs = nullptr);
  ArchPmu(const ArchPmu&) = delete;  // lbr_ works on state_
  ArchPmu& operator=(const ArchPmu&) = delete;

  static bool owns_msr(uint32_t msr);
  MsrResult wrmsr(uint32_t msr, uint64_t value);
  MsrResult rdmsr(uint32_t msr, uint64_t& value) const;

  // IA32_DEBUGCTL as the guest set it (the VMM owns the MSR): the bits the PMU keeps, which it
  // answers for when the guest reads DEBUGCTL: the freeze bits, and LBR with Config::lbr.
  uint64_t debugctl_bits() const {
    return kDebugctlFreezeBits | (config_.lbr ? debugctl::kLbr : 0);
  }
  void set_debugctl(uint64_t value) { state_.debugctl = value & debugctl_bits(); }

  // A counting backend reports one retired instruction.
  void retire(const RetiredInstruction& insn);

  // Called at every PMI, with the GLOBAL_STATUS bit that raised it (x: PMCx, 32 + i: fixed
  // counter i, 62: the PEBS buffer; the lowest where several did) and the instruction whose
  // retirement raised it: a sample.
  using PmiObserver = std::function<void(int status_bit, uint64_t rip, uint8_t cpl)>;
  void set_pmi_observer(PmiObserver observer) { pmi_observer_ = std::move(observer); }

  // Whether some counter counts a modelled event now: the backend must report instructions.
  bool wants_events() const;
  // Whether an instruction at CPL 0 can change a counter (some counting counter has OS).
  bool wants_kernel_events() const;
  // How many instructions may retire before they are reported with no overflow possible before
  // the last of them (1 where an instruction can add more than one: cycles, cache events,
  // CMASK). At least 1.
  uint64_t quiet_retirements() const;
  // Host counting (DESIGN §4.11): counters of instructions or of all branches at USR only, with
  // no CMASK/INV/EDGE, allow a batch up to their wrap; any other counting counter needs each
  // instruction.
  UnseenAllowance unseen_allowance() const;
  // The batch retired (unseen_allowance().admits(batch), else std::logic_error).
  void retire_unseen(const UnseenRetirements& batch);
  bool reads_cache_model() const;
  bool reads_branch_predictions() const;

  const ArchPmuState& state() const { return state_; }
  // Refuses (changing nothing) a state that does not fit this PMU: reserved bits, counters or
  // fixed counters it lacks holding values, counters wider than configured.
  pmu::Status load_state(const ArchPmuState& state);
  // Processor reset: counters, selects and status 0, GLOBAL_CTRL's general-purpose bits set.
  // stats() survive it.
  void reset();

  // The event counter x counts (kUnmodelled when none), for logs.
  Event counter_event(uint32_t x) const { return decode_event(state_.evtsel[x]); }
  const Config& config() const { return config_; }
  const Stats& stats() const { return stats_; }
  uint64_t perf_capabilities() const;

 private:
  uint64_t counter_mask() const { return (uint64_t{1} << config_.counter_bits) - 1; }
  uint64_t fixed_mask() const { return (uint64_t{1} << config_.fixed_counter_bits) - 1; }
  uint64_t global_enable_bits() const;  // GLOBAL_CTRL's writable bits
  uint64_t status_bits() const;         // the GLOBAL_STATUS bits this PMU has
  uint64_t evtsel_reserved() const;
  uint64_t fixed_ctrl_reserved() const;
  bool frozen() const { return state_.global_status & global::kCountersFrozen; }
  // Whether the last-branch records record now (DEBUGCTL.LBR, not LBR_Frz).
  bool lbr_recording() const {
    return (state_.debugctl & debugctl::kLbr) && !(state_.global_status & global::kLbrFrozen);
  }

  // A register of the counter banks, which and whether this PMU has it (bank kNone: another
  // register of the block). wrmsr and rdmsr decode addresses through it.
  enum class Bank : uint8_t { kNone, kPmc, kFullWidthPmc, kEventSelect, kFixed };
  struct BankRegister {
    Bank bank = Bank::kNone;
    uint32_t index = 0;
    bool exists = false;
  };
  BankRegister bank_register(uint32_t msr) const;

  // A counter that counts now (enabled, globally enabled, not frozen), general-purpose or fixed,
  // in the terms every counting rule reads: a fixed counter is one with a fixed event, no select
  // (CMASK 0, no edge state) and the OS/USR/PMI bits of its control field.
  struct Active {
    bool fixed = false;
    uint32_t index = 0;  // x of IA32_PMCx, or i of IA32_FIXED_CTRi
    Event event = Event::kUnmodelled;
    uint64_t select = 0;  // IA32_PERFEVTSELx; 0 for a fixed counter
    bool os = false, usr = false, pmi = false;
    uint64_t width_mask = 0;
    uint64_t status_bit = 0;  // its overflow bit in GLOBAL_STATUS
  };
  // Calls f(const Active&) for each counter that counts now, the general-purpose ones first.
  template <class F>
  void for_each_active(F&& f) const;
  uint64_t& value_of(const Active& c) {
    return c.fixed ? state_.fixed[c.index] : state_.pmc[c.index];
  }
  uint64_t value_of(const Active& c) const {
    return c.fixed ? state_.fixed[c.index] : state_.pmc[c.index];
  }
  // Adds `increments` to a counter of `width_mask`; true when it wrapped.
  static bool add(uint64_t& counter, uint64_t increments, uint64_t width_mask);
  // What `insn` adds to counter `c` (CMASK/INV/EDGE applied; a general-purpose counter's edge
  // state updated).
  uint64_t increments(const Active& c, const RetiredInstruction& insn);
  void raise_pmi(uint64_t raised_by, uint64_t rip, uint8_t cpl);
  // The PEBS counters that exist: IA32_PEBS_ENABLE's counter bits.
  uint64_t pebs_counter_bits() const;
  uint64_t pebs_enable_writable() const;
  // Counter `c` has PEBS enabled: its wrap takes an assist, not an overflow bit.
  bool samples_by_pebs(const Active& c) const;
  // The PEBS assist for `insn`, whose events wrapped the PEBS counters `applicable`: the record,
  // the counters' reload. True when the buffer reached its threshold (a PMI is due).
  bool pebs_assist(const RetiredInstruction& insn, uint64_t applicable);
  // The record's data address, source and latency for the events of `applicable`.
  PebsMemoryInfo memory_info(const RetiredInstruction& insn, uint64_t applicable) const;
  // How many more events a counter at `value` takes until one wraps it (that one included).
  static uint64_t remaining_to_wrap(uint64_t value, uint64_t width_mask);

  const Config config_;
  InterruptSink& interrupts_;
  PebsMachine* pebs_;
  PmiObserver pmi_observer_;
  ArchPmuState state_;
  LastBranchRecords lbr_;  // works on state_.lbr: declared after it
  Stats stats_;
};

}  // namespace pmu::arch_perfmon
