#include "pmu/arch_perfmon/pebs.h"

#include <cstring>

namespace pmu::arch_perfmon {

PebsMemoryInfo load_latency_info(const RetiredInstruction& insn) {
  // The slowest of its L1 misses, if any: that load supplied the latency.
  const CacheMiss* slowest = nullptr;
  for (uint8_t i = 0; i < insn.cache_miss_count && i < RetiredInstruction::kMaxCacheMisses; ++i)
    if (!slowest || insn.cache_misses[i].latency_cycles > slowest->latency_cycles)
      slowest = &insn.cache_misses[i];
  uint64_t source = 0x1;  // L1 hit
  if (slowest) {
    switch (slowest->source) {
      case DataSource::kL2: source = 0x3; break;
      case DataSource::kLocalL3: source = 0x4; break;
      case DataSource::kDram: source = 0xA; break;
      case DataSource::kOther: source = 0xF; break;
      case DataSource::kRemoteCache:
      case DataSource::kNoValidStatus: source = 0x0; break;
    }
  }
  return {.data_address = slowest ? slowest->data_address : insn.load_address,
          .data_source = source,
          .latency = insn.load_latency};
}

std::array<std::byte, kPebsRecordSize> pebs_record(const PebsRegisters& r, uint64_t applicable,
                                                   uint64_t eventing_ip, const PebsMemoryInfo& m) {
  // In the record's order (pebs.h); TSX tuning is 0.
  const std::array<uint64_t, kPebsRecordSize / 8> words = {
      r.rflags,   r.rip,          r.rax,         r.rbx,     r.rcx,       r.rdx, r.rsi, r.rdi, r.rbp,
      r.rsp,      r.r8,           r.r9,          r.r10,     r.r11,       r.r12, r.r13, r.r14, r.r15,
      applicable, m.data_address, m.data_source, m.latency, eventing_ip, 0,     r.tsc};
  std::array<std::byte, kPebsRecordSize> bytes;
  std::memcpy(bytes.data(), words.data(), bytes.size());  // x86 guest: little-endian, as we are
  return bytes;
}

}  // namespace pmu::arch_perfmon
