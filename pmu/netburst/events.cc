#include "pmu/netburst/events.h"

#include <array>

namespace pmu::netburst {
namespace {

constexpr std::array<MaskBit, 4> kInstrRetiredMasks = {
    {{"NBOGUSNTAG", 0}, {"NBOGUSTAG", 1}, {"BOGUSNTAG", 2}, {"BOGUSTAG", 3}}};
constexpr std::array<MaskBit, 1> kMispredMasks = {{{"NBOGUS", 0}}};
constexpr std::array<MaskBit, 4> kBranchRetiredMasks = {
    {{"MMNP", 0}, {"MMNM", 1}, {"MMTP", 2}, {"MMTM", 3}}};
constexpr std::array<MaskBit, 1> kGlobalPowerMasks = {{{"RUNNING", 0}}};
constexpr std::array<MaskBit, 9> kBsqMasks = {{{"RD_2ndL_HITS", 0},
                                               {"RD_2ndL_HITE", 1},
                                               {"RD_2ndL_HITM", 2},
                                               {"RD_3rdL_HITS", 3},
                                               {"RD_3rdL_HITE", 4},
                                               {"RD_3rdL_HITM", 5},
                                               {"RD_2ndL_MISS", 8},
                                               {"RD_3rdL_MISS", 9},
                                               {"WR_2ndL_MISS", 10}}};

constexpr EventInfo Ev(std::string_view name, uint8_t event_select, uint8_t escr_select, Escr e0,
                       Escr e1, EventKind kind = EventKind::kUnmodelled,
                       std::span<const MaskBit> masks = {}) {
  EventInfo info;
  info.name = name;
  info.event_select = event_select;
  info.escr_select = escr_select;
  info.escrs[0] = e0;
  info.escrs[1] = e1;
  info.escr_count = 2;
  info.kind = kind;
  info.masks = masks;
  return info;
}

constexpr EventInfo Ev1(std::string_view name, uint8_t event_select, uint8_t escr_select, Escr e0) {
  EventInfo info = Ev(name, event_select, escr_select, e0, e0);
  info.escr_count = 1;
  return info;
}

using K = EventKind;

constexpr std::array<EventInfo, 45> kEvents = {{
    Ev("TC_deliver_mode", 0x01, 1, Escr::kTc0, Escr::kTc1),
    Ev("BPU_fetch_request", 0x03, 0, Escr::kBpu0, Escr::kBpu1),
    Ev("ITLB_reference", 0x18, 3, Escr::kItlb0, Escr::kItlb1),
    Ev("memory_cancel", 0x02, 5, Escr::kDac0, Escr::kDac1),
    Ev("memory_complete", 0x08, 2, Escr::kSaat0, Escr::kSaat1),
    Ev("load_port_replay", 0x04, 2, Escr::kSaat0, Escr::kSaat1),
    Ev("store_port_replay", 0x05, 2, Escr::kSaat0, Escr::kSaat1),
    Ev("MOB_load_replay", 0x03, 2, Escr::kMob0, Escr::kMob1),
    Ev("page_walk_type", 0x01, 4, Escr::kPmh0, Escr::kPmh1),
    Ev("BSQ_cache_reference", 0x0C, 7, Escr::kBsu0, Escr::kBsu1, K::kBsqCacheReference, kBsqMasks),
    Ev("IOQ_allocation", 0x03, 6, Escr::kFsb0, Escr::kFsb1),
    Ev1("IOQ_active_entries", 0x1A, 6, Escr::kFsb1),
    Ev("FSB_data_activity", 0x17, 6, Escr::kFsb0, Escr::kFsb1),
    Ev1("BSQ_allocation", 0x05, 7, Escr::kBsu0),
    Ev1("BSQ_active_entries", 0x06, 7, Escr::kBsu1),
    Ev("SSE_input_assist", 0x34, 1, Escr::kFirm0, Escr::kFirm1),
    Ev("packed_SP_uop", 0x08, 1, Escr::kFirm0, Escr::kFirm1),
    Ev("packed_DP_uop", 0x0C, 1, Escr::kFirm0, Escr::kFirm1),
    Ev("scalar_SP_uop", 0x0A, 1, Escr::kFirm0, Escr::kFirm1),
    Ev("scalar_DP_uop", 0x0E, 1, Escr::kFirm0, Escr::kFirm1),
    Ev("64bit_MMX_uop", 0x02, 1, Escr::kFirm0, Escr::kFirm1),
    Ev("128bit_MMX_uop", 0x1A, 1, Escr::kFirm0, Escr::kFirm1),
    Ev("x87_FP_uop", 0x04, 1, Escr::kFirm0, Escr::kFirm1),
    Ev("TC_misc", 0x06, 1, Escr::kTc0, Escr::kTc1),
    Ev("global_power_events", 0x13, 6, Escr::kFsb0, Escr::kFsb1, K::kGlobalPowerEvents,
       kGlobalPowerMasks),
    Ev("tc_ms_xfer", 0x05, 0, Escr::kMs0, Escr::kMs1),
    Ev("uop_queue_writes", 0x09, 0, Escr::kMs0, Escr::kMs1),
    Ev("retired_mispred_branch_type", 0x05, 2, Escr::kTbpu0, Escr::kTbpu1),
    Ev("retired_branch_type", 0x04, 2, Escr::kTbpu0, Escr::kTbpu1),
    Ev("resource_stall", 0x01, 1, Escr::kAlf0, Escr::kAlf1),
    Ev("WC_Buffer", 0x05, 5, Escr::kDac0, Escr::kDac1),
    Ev("b2b_cycles", 0x16, 3, Escr::kFsb0, Escr::kFsb1),
    Ev("bnr", 0x08, 3, Escr::kFsb0, Escr::kFsb1),
    Ev("snoop", 0x06, 3, Escr::kFsb0, Escr::kFsb1),
    Ev("response", 0x04, 3, Escr::kFsb0, Escr::kFsb1),
    Ev("front_end_event", 0x08, 5, Escr::kCru2, Escr::kCru3),
    Ev("execution_event", 0x0C, 5, Escr::kCru2, Escr::kCru3),
    Ev("replay_event", 0x09, 5, Escr::kCru2, Escr::kCru3),
    Ev("instr_retired", 0x02, 4, Escr::kCru0, Escr::kCru1, K::kInstrRetired, kInstrRetiredMasks),
    Ev("uops_retired", 0x01, 4, Escr::kCru0, Escr::kCru1),
    Ev("uops_type", 0x02, 2, Escr::kRat0, Escr::kRat1),
    Ev("branch_retired", 0x06, 5, Escr::kCru2, Escr::kCru3, K::kBranchRetired, kBranchRetiredMasks),
    Ev("mispred_branch_retired", 0x03, 4, Escr::kCru0, Escr::kCru1, K::kMispredBranchRetired,
       kMispredMasks),
    Ev("x87_assist", 0x03, 5, Escr::kCru2, Escr::kCru3),
    Ev("machine_clear", 0x02, 5, Escr::kCru2, Escr::kCru3),
}};

// (ESCR, event select) -> index into kEvents, built once.
struct Index {
  std::array<std::array<int8_t, 64>, kEscrCount> slot;
  Index() {
    for (auto& row : slot) row.fill(-1);
    for (size_t i = 0; i < kEvents.size(); ++i)
      for (int k = 0; k < kEvents[i].escr_count; ++k)
        slot[static_cast<int>(kEvents[i].escrs[k])][kEvents[i].event_select] =
            static_cast<int8_t>(i);
  }
};

const Index& index() {
  static const Index kIndex;
  return kIndex;
}

uint32_t popcount_cache_refs(uint16_t mask, const RetiredInstruction& insn,
                             const EventEnvironment& env) {
  uint32_t n = 0;
  const int count = insn.cache_miss_count < RetiredInstruction::kMaxCacheMisses
                        ? insn.cache_miss_count
                        : RetiredInstruction::kMaxCacheMisses;
  for (int i = 0; i < count; ++i)
    if (bsq_reference_bits(insn.cache_misses[i], env) & mask) ++n;
  return n;
}

}  // namespace

uint16_t EventInfo::mask_bit(std::string_view mask_name) const {
  for (const MaskBit& m : masks)
    if (m.name == mask_name) return static_cast<uint16_t>(1u << m.bit);
  return 0;
}

uint16_t EventInfo::defined_mask() const {
  uint16_t all = 0;
  for (const MaskBit& m : masks) all |= static_cast<uint16_t>(1u << m.bit);
  return all;
}

std::span<const EventInfo> event_table() { return kEvents; }

const EventInfo* find_event(Escr escr, unsigned event_select) {
  if (event_select >= 64) return nullptr;
  const int i = index().slot[static_cast<int>(escr)][event_select];
  return i < 0 ? nullptr : &kEvents[i];
}

const EventInfo* find_event(std::string_view name) {
  for (const EventInfo& e : kEvents)
    if (e.name == name) return &e;
  return nullptr;
}

uint16_t bsq_reference_bits(const CacheMiss& miss, const EventEnvironment& env) {
  switch (miss.source) {
    case DataSource::kL2: return mask::kRd2ndlHite;
    case DataSource::kLocalL3:
      return env.third_level_cache ? (mask::kRd2ndlMiss | mask::kRd3rdlHite) : mask::kRd2ndlMiss;
    case DataSource::kDram:
    case DataSource::kRemoteCache:
      return env.third_level_cache ? (mask::kRd2ndlMiss | mask::kRd3rdlMiss) : mask::kRd2ndlMiss;
    case DataSource::kOther:
    case DataSource::kNoValidStatus: break;
  }
  return 0;
}

CycleInput event_input(EventKind kind, uint16_t mask, const RetiredInstruction& insn,
                       const EventEnvironment& env) {
  CycleInput in;
  switch (kind) {
    case EventKind::kUnmodelled: break;
    case EventKind::kInstrRetired:
      // Every reported instruction retired on the correct path and carries no tag.
      in.retire_value = (mask & mask::kNbogusNtag) ? 1 : 0;
      break;
    case EventKind::kMispredBranchRetired:
      in.retire_value = ((mask & mask::kNbogus) && insn.is_branch() &&
                         insn.branch.prediction_valid && !insn.branch.predicted_correctly)
                            ? 1
                            : 0;
      break;
    case EventKind::kBranchRetired: {
      if (!insn.is_branch()) break;
      const bool mispredicted = insn.branch.prediction_valid && !insn.branch.predicted_correctly;
      const uint16_t bit = insn.branch.taken ? (mispredicted ? mask::kMmtm : mask::kMmtp)
                                             : (mispredicted ? mask::kMmnm : mask::kMmnp);
      in.retire_value = (mask & bit) ? 1 : 0;
      break;
    }
    case EventKind::kGlobalPowerEvents:
      in.busy_value = in.retire_value = (mask & mask::kRunning) ? 1 : 0;
      break;
    case EventKind::kBsqCacheReference:
      in.retire_value = popcount_cache_refs(mask, insn, env);
      break;
  }
  return in;
}

}  // namespace pmu::netburst
