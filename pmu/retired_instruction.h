// What a counting backend reports for one retired guest instruction. Both PMU models (LWP,
// NetBurst) consume this; backends (precise stepping, host counters) produce it. It carries
// only architectural facts: the backend decides them (decoder, cache model), the models count.
#pragma once

#include <array>
#include <cstdint>

namespace pmu {

// Control transfers as LWP §4.2 counts them. Traps, interrupts, SYSCALL/SYSENTER/INT n and other
// ring transitions are not branches: a backend reports them with kind == kNone.
enum class BranchKind : uint8_t {
  kNone = 0,
  kConditional,   // Jcc, JrCXZ, LOOPx: taken or not taken
  kDirectJump,    // JMP rel8/rel32: unconditional, RIP-relative (the only kind NDB drops)
  kIndirectJump,  // JMP r/m
  kCall,          // CALL rel32 or CALL r/m
  kReturn,        // RET, RET imm16
};

struct BranchInfo {
  BranchKind kind = BranchKind::kNone;
  bool taken = false;     // always true for unconditional transfers
  uint64_t next_rip = 0;  // the target if taken, the fall-through address if not
  bool prediction_valid = false;
  bool predicted_correctly = false;  // meaningful only when prediction_valid
  bool indirect = false;  // the target comes from a register or memory (CALL r/m, JMP r/m, RET)
};

// Where the data of a load that missed the L1 data cache came from. The values 0–7 are the
// LWP §4.3 Figure 4 "data source" encoding; kL2 is ours: an L1 miss served by the core's own L2
// has no encoding in Figure 4 and is reported as 0 ("no valid status").
enum class DataSource : uint8_t {
  kNoValidStatus = 0,
  kLocalL3 = 1,      // a cache on the Northbridge (LWPCB filter bit NBC)
  kRemoteCache = 2,  // another CPU's cache or a remote L3 (RDC)
  kDram = 3,         // RAM
  kOther = 7,        // MMIO, config space, PCI, APIC (OTH)
  kL2 = 8,           // internal only: encodes as 0 in an event record
};

struct CacheMiss {
  uint64_t data_address = 0;    // linear address of the lowest byte that missed
  uint32_t latency_cycles = 0;  // total latency in core cycles, unrounded
  DataSource source = DataSource::kNoValidStatus;
};

struct RetiredInstruction {
  static constexpr int kMaxCacheMisses = 2;

  uint64_t rip = 0;  // linear address of the instruction (CS base already added)
  uint8_t cpl = 3;   // privilege level the instruction executed at
  // Core cycles the instruction is modelled to take (>= 1): the precise backend charges one per
  // instruction plus the latency of its cache misses; the host backend reports measured cycles.
  uint32_t cycles = 1;
  BranchInfo branch;  // branch.kind == kNone for non-branches
  // Loads directly caused by the instruction that missed the L1 data cache, in program order.
  // A misaligned load that missed twice is one entry (the lowest address), LWP §4.3.
  std::array<CacheMiss, kMaxCacheMisses> cache_misses{};
  uint8_t cache_miss_count = 0;
  // Whether it reads / writes data memory: explicit memory operands and the implicit stack ones
  // (PUSH, POP, CALL, RET), not LEA's address or a prefetch hint.
  bool loads = false;
  bool stores = false;
  // Linear addresses of its first data load and first data store (valid with loads / stores).
  uint64_t load_address = 0;
  uint64_t store_address = 0;
  // From the cache model, where the backend ran it (else 0 / false): the load-to-use latency of
  // its slowest load (the L1's latency on a hit; a miss's is in cache_misses), and whether its
  // first store hit the L1.
  uint32_t load_latency = 0;
  bool store_hit_l1 = false;

  bool is_branch() const { return branch.kind != BranchKind::kNone; }
};

}  // namespace pmu
