#include "pmu/netburst/binding.h"

#include <array>

namespace pmu::netburst {
namespace {

// One row per counter pair kind; kNone marks a select that names no ESCR.
constexpr int kNone = -1;
constexpr int E(Escr e) { return static_cast<int>(e); }

using Row = std::array<int, 8>;

constexpr Row kBpuEven = {E(Escr::kBpu0), E(Escr::kIs0), E(Escr::kMob0), E(Escr::kItlb0),
                          E(Escr::kPmh0), E(Escr::kIx0), E(Escr::kFsb0), E(Escr::kBsu0)};
constexpr Row kBpuOdd = {E(Escr::kBpu1), E(Escr::kIs1), E(Escr::kMob1), E(Escr::kItlb1),
                         E(Escr::kPmh1), E(Escr::kIx1), E(Escr::kFsb1), E(Escr::kBsu1)};
constexpr Row kMsEven = {E(Escr::kMs0), E(Escr::kTc0), E(Escr::kTbpu0), kNone,
                         kNone,         kNone,         kNone,           kNone};
constexpr Row kMsOdd = {E(Escr::kMs1), E(Escr::kTc1), E(Escr::kTbpu1), kNone,
                        kNone,         kNone,         kNone,           kNone};
constexpr Row kFlameEven = {E(Escr::kFlame0),
                            E(Escr::kFirm0),
                            E(Escr::kSaat0),
                            E(Escr::kU2l0),
                            kNone,
                            E(Escr::kDac0),
                            kNone,
                            kNone};
constexpr Row kFlameOdd = {E(Escr::kFlame1),
                           E(Escr::kFirm1),
                           E(Escr::kSaat1),
                           E(Escr::kU2l1),
                           kNone,
                           E(Escr::kDac1),
                           kNone,
                           kNone};
constexpr Row kIqEven = {E(Escr::kIq0),  E(Escr::kAlf0), E(Escr::kRat0), E(Escr::kSsu0),
                         E(Escr::kCru0), E(Escr::kCru2), E(Escr::kCru4), kNone};
constexpr Row kIqOdd = {E(Escr::kIq1),  E(Escr::kAlf1), E(Escr::kRat1), kNone,
                        E(Escr::kCru1), E(Escr::kCru3), E(Escr::kCru5), kNone};

// "Even"/"odd" name the ESCR0/ESCR1 half of a group: the first pair of a group uses the ESCR0
// registers, the second pair the ESCR1 registers; IQ counters 16 and 17 behave as 12 and 14.
constexpr std::array<const Row*, kMaxCounters> kRows = {
    &kBpuEven,   &kBpuEven,   &kBpuOdd,   &kBpuOdd,    // 0-3
    &kMsEven,    &kMsEven,    &kMsOdd,    &kMsOdd,     // 4-7
    &kFlameEven, &kFlameEven, &kFlameOdd, &kFlameOdd,  // 8-11
    &kIqEven,    &kIqEven,    &kIqOdd,    &kIqOdd,     // 12-15
    &kIqEven,    &kIqOdd,                              // 16, 17
};

}  // namespace

std::optional<Escr> escr_for(int counter, unsigned select, bool iq_escrs) {
  if (counter < 0 || counter >= kMaxCounters || select > 7) return std::nullopt;
  const int e = (*kRows[counter])[select];
  if (e == kNone) return std::nullopt;
  const Escr escr = static_cast<Escr>(e);
  if (escr_info(escr).model_specific && !iq_escrs) return std::nullopt;
  return escr;
}

std::optional<unsigned> select_for(int counter, Escr escr, bool iq_escrs) {
  for (unsigned s = 0; s < 8; ++s)
    if (escr_for(counter, s, iq_escrs) == escr) return s;
  return std::nullopt;
}

int cascade_alternate(int counter) {
  if (counter < 0 || counter >= 16) return -1;  // 16, 17: no alternate
  // Within each group of four (0-3, 4-7, 8-11, 12-15): n <-> n ^ 2.
  return counter ^ 2;
}

}  // namespace pmu::netburst
