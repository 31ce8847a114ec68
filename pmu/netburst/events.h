// The NetBurst event table: which event each ESCR's event-select value names, and what the
// modelled events count for one retired instruction.
//
// On NetBurst an event is identified by the pair (ESCR, event select): the same select value
// means different events in different ESCRs (2 is instr_retired in CRU_ESCR0/1 but
// machine_clear in CRU_ESCR2/3). The table lists all 45 events of family 0xF models 0-2
// (IA-32 SDM appendix A; names as libpfm4 spells them) with the ESCRs that can select them.
//
// Modelled events (counted exactly from RetiredInstruction; see README.md):
//   instr_retired          CRU_ESCR0/1, select 0x02: NBOGUSNTAG = every retired instruction;
//                          NBOGUSTAG, BOGUSNTAG, BOGUSTAG = 0 (nothing is bogus at retirement
//                          and nothing is tagged)
//   mispred_branch_retired CRU_ESCR0/1, select 0x03: NBOGUS (bit 0) = mispredicted branches
//   branch_retired         CRU_ESCR2/3, select 0x06: MMNP/MMNM/MMTP/MMTM = branches by
//                          (taken, mispredicted); unknown prediction counts as predicted
//   global_power_events    FSB_ESCR0/1, select 0x13: RUNNING = every cycle of `cycles`
//   BSQ_cache_reference    BSU_ESCR0/1, select 0x0C: one reference per L1D miss (see below)
// Every other (ESCR, event select) pair, listed or not, counts nothing: the counter never
// increments (not even under Compare+Complement). Mask bits an event does not define count
// nothing; defined bits are OR-ed (an occurrence counts once if it matches any selected bit).
//
// BSQ_cache_reference: each L1D miss of the instruction is one 2nd-level read reference:
//   kL2                 RD_2ndL_HITE
//   kLocalL3            RD_2ndL_MISS + RD_3rdL_HITE   (RD_2ndL_MISS only without a 3rd level)
//   kDram, kRemoteCache RD_2ndL_MISS + RD_3rdL_MISS   (RD_2ndL_MISS only without a 3rd level)
//   kOther, kNoValidStatus  not a cacheable read reference: nothing
// MESI: the model has no coherence state, so every hit is reported in the Exclusive state (a
// line filled by a read with no other sharer): HITS and HITM count 0, HITE counts every hit.
// Thus disjoint masks on separate counters add up to the total, and HITS|HITE|HITM counts each
// hit once. WR_2ndL_MISS counts 0 (write-backs are not modelled).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "pmu/netburst/msr_map.h"
#include "pmu/retired_instruction.h"

namespace pmu::netburst {

enum class EventKind : uint8_t {
  kUnmodelled = 0,
  kInstrRetired,
  kMispredBranchRetired,
  kBranchRetired,
  kGlobalPowerEvents,
  kBsqCacheReference,
};

struct MaskBit {
  std::string_view name;
  uint8_t bit;  // bit in the 16-bit event mask (ESCR bit 9 + bit)
};

struct EventInfo {
  std::string_view name;
  uint8_t event_select = 0;
  // The CCCR ESCR-select value the references give for the event. For all modelled events it is
  // the select that reaches the event's ESCRs (binding.h). For b2b_cycles, bnr, snoop and
  // response the references say 3 although their FSB ESCRs are reached with 6 (an inconsistency
  // in the sources; those events are not modelled).
  uint8_t escr_select = 0;
  Escr escrs[2] = {};
  uint8_t escr_count = 0;
  EventKind kind = EventKind::kUnmodelled;
  std::span<const MaskBit> masks;  // named mask bits; filled in for the modelled events

  bool modelled() const { return kind != EventKind::kUnmodelled; }
  // Mask value of a named bit, or 0 if the event has no such name.
  uint16_t mask_bit(std::string_view mask_name) const;
  // All named bits OR-ed.
  uint16_t defined_mask() const;
};

// All 45 events, in the SDM/libpfm4 order.
std::span<const EventInfo> event_table();

// The event `event_select` names in `escr`, or nullptr when the ESCR has no such event.
const EventInfo* find_event(Escr escr, unsigned event_select);

// By name (exact spelling of the table), or nullptr.
const EventInfo* find_event(std::string_view name);

// Mask bits of the modelled events (exported for tests and tools).
namespace mask {
inline constexpr uint16_t kNbogusNtag = 1u << 0, kNbogusTag = 1u << 1, kBogusNtag = 1u << 2,
                          kBogusTag = 1u << 3;  // instr_retired
inline constexpr uint16_t kNbogus = 1u << 0;    // mispred_branch_retired
inline constexpr uint16_t kMmnp = 1u << 0, kMmnm = 1u << 1, kMmtp = 1u << 2,
                          kMmtm = 1u << 3;     // branch_retired
inline constexpr uint16_t kRunning = 1u << 0;  // global_power_events
inline constexpr uint16_t kRd2ndlHits = 1u << 0, kRd2ndlHite = 1u << 1, kRd2ndlHitm = 1u << 2,
                          kRd3rdlHits = 1u << 3, kRd3rdlHite = 1u << 4, kRd3rdlHitm = 1u << 5,
                          kRd2ndlMiss = 1u << 8, kRd3rdlMiss = 1u << 9,
                          kWr2ndlMiss = 1u << 10;  // BSQ_cache_reference
}  // namespace mask

struct EventEnvironment {
  bool third_level_cache = false;  // the profile's CPU has a 3rd-level cache
};

// One retired instruction as the event's per-cycle input, before CPL qualification: the
// instruction occupies max(cycles, 1) cycles; every cycle but the last carries `busy_value`
// occurrences and the last (retirement) cycle carries `retire_value`. Only RUNNING has
// occurrences in the busy cycles (one per cycle); per-instruction events happen at retirement.
struct CycleInput {
  uint32_t busy_value = 0;
  uint32_t retire_value = 0;
};
CycleInput event_input(EventKind kind, uint16_t mask, const RetiredInstruction& insn,
                       const EventEnvironment& env);

// The BSQ_cache_reference attribute bits of one L1D miss (which mask bits it satisfies).
uint16_t bsq_reference_bits(const CacheMiss& miss, const EventEnvironment& env);

}  // namespace pmu::netburst
