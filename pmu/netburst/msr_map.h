// Where the NetBurst (Pentium 4) performance-monitoring MSRs live: the 18 counters, the 18 CCCRs
// and the 45 ESCRs of family 0xF (IA-32 SDM vol. 3B, Pentium 4 performance monitoring; the same
// addresses appear in Linux arch/x86/events/intel/p4.c and libpfm4's netburst tables).
//
//   0x300-0x311  counters  BPU 0-3 (0-3), MS 0-3 (4-7), FLAME 0-3 (8-11), IQ 0-5 (12-17)
//   0x360-0x371  CCCRs     one per counter, same numbering
//   0x3A0-0x3BE  ESCRs     31 registers, BSU_ESCR0 .. SSU_ESCR0 (0x3BF does not exist)
//   0x3C0-0x3C5  ESCRs     MS, TBPU, TC (0x3C6/0x3C7 do not exist)
//   0x3C8-0x3CD  ESCRs     IX, ALF, CRU_ESCR2/3
//   0x3E0-0x3E1  ESCRs     CRU_ESCR4/5
//
// IQ_ESCR0/1 (0x3BA/0x3BB) are model-specific: only family 0xF models 1 and 2 have them (Linux
// and libpfm4 both note this); the PMU's Config says whether they exist. SSU_ESCR1 (0x3BF) is not
// in the SDM's ESCR list (Linux's p4.c lists it as a guess); it does not exist here.
// Every other address in 0x300-0x3FF is not a register of this PMU (see netburst_pmu.h: #GP).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace pmu::netburst {

inline constexpr uint32_t kMsrRangeFirst = 0x300;  // the block this PMU answers for
inline constexpr uint32_t kMsrRangeLast = 0x3FF;

inline constexpr int kMaxCounters = 18;
inline constexpr uint32_t kCounterMsrBase = 0x300;  // counter n at 0x300 + n
inline constexpr uint32_t kCccrMsrBase = 0x360;     // CCCR n at 0x360 + n

// The 45 ESCRs, in address order. The enumerator is the index used by tables and saved state.
enum class Escr : uint8_t {
  kBsu0,
  kBsu1,
  kFsb0,
  kFsb1,
  kFirm0,
  kFirm1,
  kFlame0,
  kFlame1,
  kDac0,
  kDac1,
  kMob0,
  kMob1,
  kPmh0,
  kPmh1,
  kSaat0,
  kSaat1,
  kU2l0,
  kU2l1,
  kBpu0,
  kBpu1,
  kIs0,
  kIs1,
  kItlb0,
  kItlb1,
  kCru0,
  kCru1,
  kIq0,
  kIq1,
  kRat0,
  kRat1,
  kSsu0,
  kMs0,
  kMs1,
  kTbpu0,
  kTbpu1,
  kTc0,
  kTc1,
  kIx0,
  kIx1,
  kAlf0,
  kAlf1,
  kCru2,
  kCru3,
  kCru4,
  kCru5,
};
inline constexpr int kEscrCount = 45;

struct EscrInfo {
  Escr id;
  uint32_t msr;
  std::string_view name;  // SDM name without the MSR_ prefix, e.g. "CRU_ESCR0"
  bool model_specific;    // IQ_ESCR0/1: present only when Config::iq_escrs
};

// All 45 ESCRs in address order (index = static_cast<int>(Escr)).
const std::array<EscrInfo, kEscrCount>& escr_table();

inline const EscrInfo& escr_info(Escr e) { return escr_table()[static_cast<int>(e)]; }
inline uint32_t escr_msr(Escr e) { return escr_info(e).msr; }
inline std::string_view escr_name(Escr e) { return escr_info(e).name; }

// The ESCR at `msr`, or nullopt when `msr` is not one of the 45 (holes included).
std::optional<Escr> escr_at(uint32_t msr);

// "BPU_COUNTER0" .. "IQ_COUNTER5" for n = 0..17; "" otherwise. CCCR names follow the same
// pattern ("BPU_CCCR0" ..).
std::string_view counter_name(int n);
std::string_view cccr_name(int n);

inline constexpr bool is_counter_msr(uint32_t msr) {
  return msr >= kCounterMsrBase && msr < kCounterMsrBase + kMaxCounters;
}
inline constexpr bool is_cccr_msr(uint32_t msr) {
  return msr >= kCccrMsrBase && msr < kCccrMsrBase + kMaxCounters;
}

}  // namespace pmu::netburst
