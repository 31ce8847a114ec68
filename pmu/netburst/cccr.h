// CCCR (counter configuration control register) bit layout, IA-32 SDM vol. 3B, Pentium 4 "CCCR"
// figure (spec/netburst-escr-cccr-notes-ja.txt §2.3, Linux perf_event_p4.h, libpfm4):
//
//   bits 11:0   reserved
//   bit  12     Enable
//   bits 15:13  ESCR select   which ESCR this counter reads (binding.h)
//   bits 17:16  Active thread (SDM non-HT figure: "reserved, must be set to 11B")
//   bit  18     Compare
//   bit  19     Complement
//   bits 23:20  Threshold
//   bit  24     Edge
//   bit  25     FORCE_OVF
//   bit  26     OVF_PMI_T0
//   bit  27     OVF_PMI_T1
//   bits 29:28  reserved
//   bit  30     Cascade
//   bit  31     OVF (sticky)
//   bits 63:32  reserved
//
// Reserved-bit rule (SDM WRMSR: #GP(0) when a reserved bit is set): a WRMSR setting any of bits
// 11:0, 29:28 or 63:32 raises #GP and changes nothing. That includes bit 11 of the IQ CCCRs,
// which the SDM defines on some family 0xF models for *extended cascading* (CASCNTxINTOy):
// extended cascading is not modelled, so that bit is rejected like the other reserved bits.
// All other bits are stored as written and read back unchanged.
//
// Choices where the SDM leaves room (see README.md):
//  * Active thread, single logical processor that is always active while it retires
//    instructions: 01 (single) and 11 (any) count; 00 (none) and 10 (both) never count. The
//    field gates the counter's increments (it is not an event input, so Complement cannot turn
//    "never" into "every cycle"). Software that follows the non-HT rule (11B) counts normally.
//  * OVF_PMI_T1 is accepted, stored and inert (no logical processor 1).
//  * OVF can be written either way by software; hardware only ever sets it.
//  * Edge only has an effect with Compare set (SDM: "active only when the compare flag is set").
#pragma once

#include <cstdint>

namespace pmu::netburst::cccr {

inline constexpr uint64_t kExtendedCascade = 1ull << 11;  // IQ CCCRs on some models; rejected
inline constexpr uint64_t kEnable = 1ull << 12;
inline constexpr int kEscrSelectShift = 13;
inline constexpr uint64_t kEscrSelectMask = 7ull << kEscrSelectShift;
inline constexpr int kActiveThreadShift = 16;
inline constexpr uint64_t kActiveThreadMask = 3ull << kActiveThreadShift;
inline constexpr uint64_t kActiveThreadAny = 3ull << kActiveThreadShift;
inline constexpr uint64_t kActiveThreadSingle = 1ull << kActiveThreadShift;
inline constexpr uint64_t kCompare = 1ull << 18;
inline constexpr uint64_t kComplement = 1ull << 19;
inline constexpr int kThresholdShift = 20;
inline constexpr uint64_t kThresholdMask = 0xFull << kThresholdShift;
inline constexpr uint64_t kEdge = 1ull << 24;
inline constexpr uint64_t kForceOvf = 1ull << 25;
inline constexpr uint64_t kOvfPmiT0 = 1ull << 26;
inline constexpr uint64_t kOvfPmiT1 = 1ull << 27;
inline constexpr uint64_t kCascade = 1ull << 30;
inline constexpr uint64_t kOvf = 1ull << 31;

inline constexpr uint64_t kWritable = 0xCFFFF000ull;  // bits 31:30 and 27:12
inline constexpr uint64_t kReserved = ~kWritable;     // bits 63:32, 29:28, 11:0 -> #GP

inline constexpr unsigned escr_select(uint64_t v) {
  return static_cast<unsigned>((v & kEscrSelectMask) >> kEscrSelectShift);
}
inline constexpr unsigned active_thread(uint64_t v) {
  return static_cast<unsigned>((v & kActiveThreadMask) >> kActiveThreadShift);
}
inline constexpr unsigned threshold(uint64_t v) {
  return static_cast<unsigned>((v & kThresholdMask) >> kThresholdShift);
}
// Active-thread values under which a single, always-active logical processor counts.
inline constexpr bool active_thread_counts(uint64_t v) { return (active_thread(v) & 1) != 0; }

// A CCCR value that enables counting through ESCR select `select`, with active thread = any.
inline constexpr uint64_t make(unsigned select) {
  return kEnable | (uint64_t{select & 7} << kEscrSelectShift) | kActiveThreadAny;
}

}  // namespace pmu::netburst::cccr
