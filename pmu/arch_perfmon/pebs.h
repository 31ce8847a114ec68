// Processor Event-Based Sampling as the architectural PMU model does it (SDM vol. 3B 18.4.4
// "Debug Store (DS) Mechanism" and the Skylake PEBS record, format 3): the DS save area's PEBS
// fields, the record, and what a PEBS assist needs of the vCPU beyond the PMU.
//
// The 64-bit DS save area (IA32_DS_AREA holds its linear address; a supervisor structure):
//   0x00 BTS buffer base, 0x08 BTS index, 0x10 BTS absolute maximum, 0x18 BTS threshold
//        (BTS is not offered: MISC_ENABLE says BTS unavailable, so these are never read)
//   0x20 PEBS buffer base          0x28 PEBS index (where the next record goes)
//   0x30 PEBS absolute maximum     0x38 PEBS interrupt threshold
//   0x40 + 8x  PEBS counter reset value of IA32_PMCx
//
// A record of format 3 is 0xC8 bytes (25 quadwords): RFLAGS, RIP, RAX, RBX, RCX, RDX, RSI, RDI,
// RBP, RSP, R8-R15 (the state after the eventing instruction), the applicable counters, the data
// linear address, data source and latency (PebsMemoryInfo), the eventing IP, TSX tuning (0: no
// TSX) and the TSC. (../shared/notes/arch-pmu-research.md says 0xC0; Linux's
// struct pebs_record_skl and the SDM's table end with the TSC at 0xC0, so 0xC8.)
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "pmu/guest_memory.h"
#include "pmu/retired_instruction.h"

namespace pmu::arch_perfmon {

namespace ds {
inline constexpr uint64_t kPebsBufferBase = 0x20;
inline constexpr uint64_t kPebsIndex = 0x28;
inline constexpr uint64_t kPebsAbsoluteMaximum = 0x30;
inline constexpr uint64_t kPebsInterruptThreshold = 0x38;
inline constexpr uint64_t kPebsCounterReset = 0x40;  // + 8 x
}  // namespace ds

// The vCPU's state right after the eventing instruction retired.
struct PebsRegisters {
  uint64_t rflags = 0, rip = 0;
  uint64_t rax = 0, rbx = 0, rcx = 0, rdx = 0, rsi = 0, rdi = 0, rbp = 0, rsp = 0;
  uint64_t r8 = 0, r9 = 0, r10 = 0, r11 = 0, r12 = 0, r13 = 0, r14 = 0, r15 = 0;
  uint64_t tsc = 0;
};

inline constexpr size_t kPebsRecordSize = 0xC8;  // format 3

// The record's memory fields (SDM vol. 3B 18.8.1.2 "Load Latency Performance Monitoring
// Facility", 18.8.1.3 "Precise Store Facility"; 0 for events that access no memory):
//   MEM_TRANS_RETIRED.LOAD_LATENCY: the load's linear address; the data source encoding in bits
//     3:0 (1 L1 hit, 3 L2 hit, 4 L3 hit, 0xA L3 miss served by local DRAM, 0 an unknown L3
//     miss, 0xF uncached), STLB miss (bit 4) and lock (bit 5) 0; the load's latency in cycles.
//   MEM_INST_RETIRED.ALL_LOADS: the load's address.  ALL_STORES: the store's address, and bit 0
//     of the data source set when the store hit the L1.
struct PebsMemoryInfo {
  uint64_t data_address = 0;
  uint64_t data_source = 0;
  uint64_t latency = 0;
  bool operator==(const PebsMemoryInfo&) const = default;
};

// The load-latency fields for `insn` (its slowest load: where it came from, how long it took).
PebsMemoryInfo load_latency_info(const RetiredInstruction& insn);

// The record's bytes: `regs`, `applicable` (bit x: PMCx's overflow caused it), `eventing_ip`.
std::array<std::byte, kPebsRecordSize> pebs_record(const PebsRegisters& regs, uint64_t applicable,
                                                   uint64_t eventing_ip,
                                                   const PebsMemoryInfo& memory = {});

// What a PEBS assist needs of the vCPU. The VMM implements it; tests with a flat memory.
class PebsMachine {
 public:
  virtual ~PebsMachine() = default;
  // Guest memory by linear address in the vCPU's current address space, with supervisor
  // access: the DS save area and the PEBS buffer are the kernel's.
  virtual GuestMemory& supervisor_memory() = 0;
  // The registers now, which the backend reports a retirement at: the state after it.
  virtual PebsRegisters registers_after() = 0;
};

}  // namespace pmu::arch_perfmon
