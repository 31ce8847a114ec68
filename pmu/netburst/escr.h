// ESCR (event selection control register) bit layout, IA-32 SDM vol. 3B, Pentium 4 "ESCR" figure
// (the same layout as spec/netburst-escr-cccr-notes-ja.txt §2.2 and Linux perf_event_p4.h):
//
//   bit  0      T1_USR        count CPL 1-3 on logical processor 1
//   bit  1      T1_OS         count CPL 0 on logical processor 1
//   bit  2      T0_USR        count CPL 1-3 on logical processor 0
//   bit  3      T0_OS         count CPL 0 on logical processor 0
//   bit  4      Tag enable
//   bits 8:5    Tag value
//   bits 24:9   Event mask    sub-events of the selected event class (OR-ed)
//   bits 30:25  Event select  event class; its meaning depends on which ESCR this is
//   bits 63:31  reserved
//
// Reserved-bit rule (SDM WRMSR: "#GP(0) if the value sets bits that are reserved in the MSR"):
// a WRMSR that sets any of bits 63:31 raises #GP and changes nothing. Every other bit is stored
// as written and read back unchanged.
//
// Single-thread profile: the T1 bits are accepted, stored and inert (there is no logical
// processor 1). Tag enable / tag value are accepted and stored; no modelled event tags µops, so
// they change no count (instr_retired's *TAG masks therefore count 0).
#pragma once

#include <cstdint>

namespace pmu::netburst::escr {

inline constexpr uint64_t kT1Usr = 1ull << 0;
inline constexpr uint64_t kT1Os = 1ull << 1;
inline constexpr uint64_t kT0Usr = 1ull << 2;
inline constexpr uint64_t kT0Os = 1ull << 3;
inline constexpr uint64_t kTagEnable = 1ull << 4;
inline constexpr int kTagValueShift = 5;
inline constexpr uint64_t kTagValueMask = 0xFull << kTagValueShift;
inline constexpr int kEventMaskShift = 9;
inline constexpr uint64_t kEventMaskMask = 0xFFFFull << kEventMaskShift;
inline constexpr int kEventSelectShift = 25;
inline constexpr uint64_t kEventSelectMask = 0x3Full << kEventSelectShift;

inline constexpr uint64_t kWritable = 0x7FFFFFFFull;  // bits 30:0
inline constexpr uint64_t kReserved = ~kWritable;     // bits 63:31 -> #GP

inline constexpr unsigned event_select(uint64_t v) {
  return static_cast<unsigned>((v & kEventSelectMask) >> kEventSelectShift);
}
inline constexpr uint16_t event_mask(uint64_t v) {
  return static_cast<uint16_t>((v & kEventMaskMask) >> kEventMaskShift);
}

// An ESCR value from its fields (for tests and tools).
inline constexpr uint64_t make(unsigned event_select, uint16_t mask, bool t0_os, bool t0_usr) {
  return (uint64_t{event_select & 0x3F} << kEventSelectShift) |
         (uint64_t{mask} << kEventMaskShift) | (t0_os ? kT0Os : 0) | (t0_usr ? kT0Usr : 0);
}

}  // namespace pmu::netburst::escr
