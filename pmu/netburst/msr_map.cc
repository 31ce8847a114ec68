#include "pmu/netburst/msr_map.h"

namespace pmu::netburst {

const std::array<EscrInfo, kEscrCount>& escr_table() {
  // A table, one row per line (tools/check_format.sh leaves it).
  // clang-format off
  static constexpr std::array<EscrInfo, kEscrCount> kTable = {{
      {Escr::kBsu0, 0x3A0, "BSU_ESCR0", false},
      {Escr::kBsu1, 0x3A1, "BSU_ESCR1", false},
      {Escr::kFsb0, 0x3A2, "FSB_ESCR0", false},
      {Escr::kFsb1, 0x3A3, "FSB_ESCR1", false},
      {Escr::kFirm0, 0x3A4, "FIRM_ESCR0", false},
      {Escr::kFirm1, 0x3A5, "FIRM_ESCR1", false},
      {Escr::kFlame0, 0x3A6, "FLAME_ESCR0", false},
      {Escr::kFlame1, 0x3A7, "FLAME_ESCR1", false},
      {Escr::kDac0, 0x3A8, "DAC_ESCR0", false},
      {Escr::kDac1, 0x3A9, "DAC_ESCR1", false},
      {Escr::kMob0, 0x3AA, "MOB_ESCR0", false},
      {Escr::kMob1, 0x3AB, "MOB_ESCR1", false},
      {Escr::kPmh0, 0x3AC, "PMH_ESCR0", false},
      {Escr::kPmh1, 0x3AD, "PMH_ESCR1", false},
      {Escr::kSaat0, 0x3AE, "SAAT_ESCR0", false},
      {Escr::kSaat1, 0x3AF, "SAAT_ESCR1", false},
      {Escr::kU2l0, 0x3B0, "U2L_ESCR0", false},
      {Escr::kU2l1, 0x3B1, "U2L_ESCR1", false},
      {Escr::kBpu0, 0x3B2, "BPU_ESCR0", false},
      {Escr::kBpu1, 0x3B3, "BPU_ESCR1", false},
      {Escr::kIs0, 0x3B4, "IS_ESCR0", false},
      {Escr::kIs1, 0x3B5, "IS_ESCR1", false},
      {Escr::kItlb0, 0x3B6, "ITLB_ESCR0", false},
      {Escr::kItlb1, 0x3B7, "ITLB_ESCR1", false},
      {Escr::kCru0, 0x3B8, "CRU_ESCR0", false},
      {Escr::kCru1, 0x3B9, "CRU_ESCR1", false},
      {Escr::kIq0, 0x3BA, "IQ_ESCR0", true},
      {Escr::kIq1, 0x3BB, "IQ_ESCR1", true},
      {Escr::kRat0, 0x3BC, "RAT_ESCR0", false},
      {Escr::kRat1, 0x3BD, "RAT_ESCR1", false},
      {Escr::kSsu0, 0x3BE, "SSU_ESCR0", false},
      {Escr::kMs0, 0x3C0, "MS_ESCR0", false},
      {Escr::kMs1, 0x3C1, "MS_ESCR1", false},
      {Escr::kTbpu0, 0x3C2, "TBPU_ESCR0", false},
      {Escr::kTbpu1, 0x3C3, "TBPU_ESCR1", false},
      {Escr::kTc0, 0x3C4, "TC_ESCR0", false},
      {Escr::kTc1, 0x3C5, "TC_ESCR1", false},
      {Escr::kIx0, 0x3C8, "IX_ESCR0", false},
      {Escr::kIx1, 0x3C9, "IX_ESCR1", false},
      {Escr::kAlf0, 0x3CA, "ALF_ESCR0", false},
      {Escr::kAlf1, 0x3CB, "ALF_ESCR1", false},
      {Escr::kCru2, 0x3CC, "CRU_ESCR2", false},
      {Escr::kCru3, 0x3CD, "CRU_ESCR3", false},
      {Escr::kCru4, 0x3E0, "CRU_ESCR4", false},
      {Escr::kCru5, 0x3E1, "CRU_ESCR5", false},
  }};
  // clang-format on
  return kTable;
}

std::optional<Escr> escr_at(uint32_t msr) {
  // 45 entries: a linear scan is cheap and needs no second table to keep in sync.
  if (msr < 0x3A0 || msr > 0x3E1) return std::nullopt;
  for (const EscrInfo& e : escr_table())
    if (e.msr == msr) return e.id;
  return std::nullopt;
}

std::string_view counter_name(int n) {
  static constexpr std::array<std::string_view, kMaxCounters> kNames = {
      "BPU_COUNTER0",   "BPU_COUNTER1",   "BPU_COUNTER2", "BPU_COUNTER3",   "MS_COUNTER0",
      "MS_COUNTER1",    "MS_COUNTER2",    "MS_COUNTER3",  "FLAME_COUNTER0", "FLAME_COUNTER1",
      "FLAME_COUNTER2", "FLAME_COUNTER3", "IQ_COUNTER0",  "IQ_COUNTER1",    "IQ_COUNTER2",
      "IQ_COUNTER3",    "IQ_COUNTER4",    "IQ_COUNTER5"};
  return n >= 0 && n < kMaxCounters ? kNames[n] : std::string_view();
}

std::string_view cccr_name(int n) {
  static constexpr std::array<std::string_view, kMaxCounters> kNames = {
      "BPU_CCCR0", "BPU_CCCR1", "BPU_CCCR2",   "BPU_CCCR3",   "MS_CCCR0",    "MS_CCCR1",
      "MS_CCCR2",  "MS_CCCR3",  "FLAME_CCCR0", "FLAME_CCCR1", "FLAME_CCCR2", "FLAME_CCCR3",
      "IQ_CCCR0",  "IQ_CCCR1",  "IQ_CCCR2",    "IQ_CCCR3",    "IQ_CCCR4",    "IQ_CCCR5"};
  return n >= 0 && n < kMaxCounters ? kNames[n] : std::string_view();
}

}  // namespace pmu::netburst
