// The events this model counts, by IA32_PERFEVTSELx event select and unit mask, and what each
// retired instruction adds to them. The seven architectural events (SDM vol. 3B, "Pre-defined
// Architectural Performance Events", CPUID 0xA EBX) and the Skylake events the backends' models
// can tell (SDM vol. 3B ch. 21 / Intel's perfmon tables for model 0x5E):
//
//   0x3C/0x00 UnHalted Core Cycles (CPU_CLK_UNHALTED.THREAD_P)   the instruction's cycles
//   0x3C/0x01 UnHalted Reference Cycles (CPU_CLK_UNHALTED.REF_XCLK) the same cycles: the model's
//             clock never changes frequency, so reference and core cycles are one count
//   0xC0/0x00 Instructions Retired (INST_RETIRED.ANY_P)          1
//   0xC0/0x01 INST_RETIRED.PREC_DIST                             1
//   0x2E/0x4F LLC Reference (LONGEST_LAT_CACHE.REFERENCE)        misses of the levels before
//             the last that reach it
//   0x2E/0x41 LLC Misses (LONGEST_LAT_CACHE.MISS)                those the last level misses
//   0xC4/0x00 Branch Instructions Retired (BR_INST_RETIRED.ALL_BRANCHES)  1 per branch
//   0xC4/0x01 BR_INST_RETIRED.CONDITIONAL   Jcc, JrCXZ, LOOPx (rr's ticks)
//   0xC4/0x02 BR_INST_RETIRED.NEAR_CALL     CALL
//   0xC4/0x08 BR_INST_RETIRED.NEAR_RETURN   RET
//   0xC4/0x20 BR_INST_RETIRED.NEAR_TAKEN    every taken branch
//   0xC5/0x00 Branch Misses Retired (BR_MISP_RETIRED.ALL_BRANCHES)  branches the predictor
//             got wrong (counted only where the backend reports a prediction)
//   0xCD/0x01 MEM_TRANS_RETIRED.LOAD_LATENCY  1 per instruction whose slowest load took more
//             cycles than MSR_PEBS_LD_LAT_THRESHOLD (the cache model's load-to-use latency of
//             the level that supplied it; hardware tags one load at a time at random, the
//             model every load)
//   0xD0/0x81 MEM_INST_RETIRED.ALL_LOADS    1 per instruction that reads data memory
//   0xD0/0x82 MEM_INST_RETIRED.ALL_STORES   1 per instruction that writes data memory
//             (explicit operands and the stack's: PUSH, POP, CALL, RET; RetiredInstruction)
//
// Cycles: the model charges each instruction one cycle plus the load-to-use latency of each of
// its loads that misses the L1 (the profile's cache geometry and latencies; RetiredInstruction::
// cycles), so a program that loads nothing runs one instruction per cycle. CMASK/INV/EDGE apply
// per cycle: in an instruction's cycles before the last nothing retires, in its last it does.
// Linux's precise cycles (cycles:pp) are INST_RETIRED.ANY_P with INV and CMASK 16: every cycle.
//
// "Branches" are what the backends report as branches (pmu/retired_instruction.h): near
// transfers; SYSCALL, INT n, IRET and other far transfers are not (BR_INST_RETIRED.FAR_BRANCH
// is not modelled). Any other event or unit mask counts nothing: a counter programmed with it
// keeps its value.
#pragma once

#include <cstdint>

#include "pmu/retired_instruction.h"

namespace pmu::arch_perfmon {

enum class Event : uint8_t {
  kUnmodelled,
  kCoreCycles,
  kReferenceCycles,
  kInstructions,
  kLlcReferences,
  kLlcMisses,
  kBranches,
  kConditionalBranches,
  kNearCalls,
  kNearReturns,
  kNearTakenBranches,
  kMispredictedBranches,
  kMemoryLoads,
  kMemoryStores,
  kLoadLatency,
};

// The event IA32_PERFEVTSELx's event select and unit mask (bits 15:0) name.
Event decode_event(uint64_t evtsel);
// The events of fixed counters 0, 1, 2 (SDM: INST_RETIRED.ANY, CPU_CLK_UNHALTED.THREAD,
// CPU_CLK_UNHALTED.REF_TSC).
Event fixed_counter_event(uint32_t index);

// Whether the event counts per cycle (one occurrence in every cycle of an instruction) rather
// than per retirement (its occurrences all in the instruction's last cycle).
bool counts_cycles(Event e);
// Whether the event depends on the cache model or on the branch predictor.
bool reads_cache_model(Event e);
bool reads_branch_predictions(Event e);

// Occurrences of `e` in the retirement of `insn` (for a cycles event: in each of its cycles).
// `third_level_cache`: the last level of the cache model is an L3 (else its L2).
// `load_latency_threshold`: MSR_PEBS_LD_LAT_THRESHOLD's bits 15:0.
uint32_t occurrences(Event e, const RetiredInstruction& insn, bool third_level_cache,
                     uint32_t load_latency_threshold = 0);

}  // namespace pmu::arch_perfmon
