#include "pmu/arch_perfmon/events.h"

#include "pmu/arch_perfmon/msr_map.h"

namespace pmu::arch_perfmon {
namespace {

// A miss of the L1 data cache reached the last level: served by the L3 or beyond when the
// last level is an L3, by anything when it is the L2.
bool reaches_last_level(const CacheMiss& m, bool third_level_cache) {
  return !third_level_cache || m.source != DataSource::kL2;
}

// ... and the last level missed it too.
bool misses_last_level(const CacheMiss& m, bool third_level_cache) {
  if (!third_level_cache) return m.source != DataSource::kL2;
  return m.source == DataSource::kDram || m.source == DataSource::kRemoteCache ||
         m.source == DataSource::kOther;
}

}  // namespace

Event decode_event(uint64_t evtsel) {
  const uint8_t select = evtsel & evtsel::kEventSelect;
  const uint8_t mask = (evtsel & evtsel::kUnitMask) >> 8;
  switch (select) {
    case 0x3C:
      if (mask == 0x00) return Event::kCoreCycles;
      if (mask == 0x01) return Event::kReferenceCycles;
      break;
    case 0xC0:
      // 0x01 is INST_RETIRED.PREC_DIST: the same count, sampled without PEBS shadowing (Linux's
      // :ppp), which a zero-skid model gives every event.
      if (mask == 0x00 || mask == 0x01) return Event::kInstructions;
      break;
    case 0x2E:
      if (mask == 0x4F) return Event::kLlcReferences;
      if (mask == 0x41) return Event::kLlcMisses;
      break;
    case 0xC4:
      switch (mask) {
        case 0x00: return Event::kBranches;
        case 0x01: return Event::kConditionalBranches;
        case 0x02: return Event::kNearCalls;
        case 0x08: return Event::kNearReturns;
        case 0x20: return Event::kNearTakenBranches;
        default: break;
      }
      break;
    case 0xC5:
      if (mask == 0x00) return Event::kMispredictedBranches;
      break;
    case 0xCD:
      if (mask == 0x01) return Event::kLoadLatency;
      break;
    case 0xD0:
      if (mask == 0x81) return Event::kMemoryLoads;
      if (mask == 0x82) return Event::kMemoryStores;
      break;
    default: break;
  }
  return Event::kUnmodelled;
}

Event fixed_counter_event(uint32_t index) {
  switch (index) {
    case 0: return Event::kInstructions;
    case 1: return Event::kCoreCycles;
    case 2: return Event::kReferenceCycles;
    default: return Event::kUnmodelled;
  }
}

bool counts_cycles(Event e) { return e == Event::kCoreCycles || e == Event::kReferenceCycles; }

bool reads_cache_model(Event e) {
  // Cycles grow with cache-miss latencies (RetiredInstruction::cycles); a load-latency event
  // counts by latency.
  return e == Event::kLlcReferences || e == Event::kLlcMisses || e == Event::kLoadLatency ||
         counts_cycles(e);
}

bool reads_branch_predictions(Event e) { return e == Event::kMispredictedBranches; }

uint32_t occurrences(Event e, const RetiredInstruction& insn, bool third_level_cache,
                     uint32_t load_latency_threshold) {
  const BranchInfo& b = insn.branch;
  auto count_misses = [&](bool (*rule)(const CacheMiss&, bool)) {
    uint32_t n = 0;
    for (uint8_t i = 0; i < insn.cache_miss_count && i < RetiredInstruction::kMaxCacheMisses; ++i)
      n += rule(insn.cache_misses[i], third_level_cache) ? 1 : 0;
    return n;
  };
  switch (e) {
    case Event::kUnmodelled: return 0;
    case Event::kCoreCycles:
    case Event::kReferenceCycles: return 1;  // in each cycle
    case Event::kInstructions: return 1;
    case Event::kLlcReferences: return count_misses(reaches_last_level);
    case Event::kLlcMisses: return count_misses(misses_last_level);
    case Event::kBranches: return insn.is_branch() ? 1 : 0;
    case Event::kConditionalBranches: return b.kind == BranchKind::kConditional ? 1 : 0;
    case Event::kNearCalls: return b.kind == BranchKind::kCall ? 1 : 0;
    case Event::kNearReturns: return b.kind == BranchKind::kReturn ? 1 : 0;
    case Event::kNearTakenBranches: return insn.is_branch() && b.taken ? 1 : 0;
    case Event::kMispredictedBranches:
      return insn.is_branch() && b.prediction_valid && !b.predicted_correctly ? 1 : 0;
    case Event::kMemoryLoads: return insn.loads ? 1 : 0;
    case Event::kMemoryStores: return insn.stores ? 1 : 0;
    case Event::kLoadLatency:
      return insn.loads && insn.load_latency > load_latency_threshold ? 1 : 0;
  }
  return 0;
}

}  // namespace pmu::arch_perfmon
