// Which ESCR a counter reads for each value of its CCCR's ESCR-select field (bits 15:13), and
// which counter is its cascade alternate (IA-32 SDM, table of counters, CCCRs and ESCRs).
//
//   counters  select: 0     1     2     3     4     5     6     7
//   0, 1      BPU0  IS0   MOB0  ITLB0 PMH0  IX0   FSB0  BSU0
//   2, 3      BPU1  IS1   MOB1  ITLB1 PMH1  IX1   FSB1  BSU1
//   4, 5      MS0   TC0   TBPU0 -     -     -     -     -
//   6, 7      MS1   TC1   TBPU1 -     -     -     -     -
//   8, 9      FLAME0 FIRM0 SAAT0 U2L0 -     DAC0  -     -
//   10, 11    FLAME1 FIRM1 SAAT1 U2L1 -     DAC1  -     -
//   12, 13, 16  IQ0  ALF0  RAT0  SSU0  CRU0  CRU2  CRU4  -
//   14, 15, 17  IQ1  ALF1  RAT1  -     CRU1  CRU3  CRU5  -
//
// A "-" (or IQ0/IQ1 on a model without IQ ESCRs) is a selection the counter cannot use: the
// CCCR accepts it, as hardware does, and the counter counts nothing.
#pragma once

#include <optional>

#include "pmu/netburst/msr_map.h"

namespace pmu::netburst {

// The ESCR counter `counter` (0..17) reads with ESCR select `select` (0..7), or nullopt when
// that combination names no ESCR. `iq_escrs` says whether IQ_ESCR0/1 exist on this model.
std::optional<Escr> escr_for(int counter, unsigned select, bool iq_escrs = true);

// The ESCR-select value under which `counter` reaches `escr`, or nullopt if it cannot.
std::optional<unsigned> select_for(int counter, Escr escr, bool iq_escrs = true);

// Cascading (SDM "Cascading Counters"): the first counters of the two pairs of a group start
// each other, and so do the second counters: 0<->2, 1<->3, 4<->6, 5<->7, 8<->10, 9<->11,
// 12<->14, 13<->15. Counters 16 and 17 have no alternate (the SDM: they cannot initiate
// cascading; extended cascading is not modelled). Returns -1 for them.
int cascade_alternate(int counter);

}  // namespace pmu::netburst
