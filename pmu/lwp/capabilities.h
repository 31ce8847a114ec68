// LWP capabilities of one (virtual) processor, and their CPUID 0x8000001C encoding
// (proposal §5.1, Table 2). A CPU profile fills Capabilities; the VMM publishes cpuid_leaf().
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "pmu/status.h"

namespace pmu::lwp {

struct CpuidLeaf {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  bool operator==(const CpuidLeaf&) const = default;
};

struct Capabilities {
  bool available = false;             // EDX 0
  bool interrupt = false;             // EDX 1: threshold interrupt available
  bool instructions_retired = false;  // EDX 2: EventId 1
  bool branches_retired = false;      // EDX 3: EventId 2
  bool dcache_misses = false;         // EDX 4: EventId 3
  uint8_t max_events = 0;             // EBX 23:16: event slots in the LWPCB (1..26)
  uint8_t cache_max_bits = 10;        // ECX 4:0: n, latency counters cap at 2^n - 16 (10..31)
  bool data_address = false;          // ECX 5: DCache records carry the data address
  bool cache_level_filter = false;    // ECX 30: CLF honoured
  bool cache_latency_filter = false;  // ECX 31: MinLatency honoured
  uint8_t version = 1;                // EBX 31:24
  // Not in CPUID: branch records carry the modelled predictor's verdict (PRD valid, §4.2). An
  // implementation may not capture it ("on some or all branches"): then no record has it, no
  // branch trains the predictor, and a host counter of retired branches can count BranchesRetired
  // between records (DESIGN §4.11).
  bool branch_prediction = true;

  bool operator==(const Capabilities&) const = default;

  uint32_t lwpcb_size() const;  // 40 + 8 * max_events (EBX 7:0)
  bool event_available(uint8_t event_id) const;
  // Largest latency the counters can report: 2^n - 16 (§4.3.1).
  uint32_t max_latency() const;

  // The EDX word of Table 2.
  uint32_t edx() const;
  // The LWPMSR0 bits (EN, IRE, BRE, DME, INT) that this processor allows to be set, i.e. the
  // per-feature translation of EDX into LWPMSR0 numbering (DESIGN §4.1).
  uint64_t msr0_allowed() const;
};

// The whole leaf. EAX reflects the enabled features, i.e. LWPMSR0's EN/IRE/BRE/DME/INT bits
// (Table 2: "The bits returned in EAX are taken from LWPMSR0"); EBX/ECX/EDX the capabilities.
// When !caps.available the leaf is all zero.
CpuidLeaf cpuid_leaf(const Capabilities& caps, uint64_t lwpmsr0);

// Inverse of cpuid_leaf for EBX/ECX/EDX (EAX is state, not capability).
Capabilities capabilities_from_cpuid(const CpuidLeaf& leaf);

// Ok when `caps` describes an LWP implementation of the proposal, else refused with why.
// Rules: version 1; 1 <= max_events <= 26; 10 <= cache_max_bits <= 31; a processor that offers
// DCache-miss events filters by latency or by cache level (§5.4 MinLatency/CLF notes).
pmu::Status validate(const Capabilities& caps);

// The capabilities a migration set may advertise (§5.1 note on SVM): the AND of every feature bit
// and the minimum of MaxEvents and CacheMax over all members. If the AND leaves DCache misses
// without any filter, DCache misses are dropped too, so the result still validates.
// An empty set yields "not available".
Capabilities baseline(std::span<const Capabilities> members);

}  // namespace pmu::lwp
