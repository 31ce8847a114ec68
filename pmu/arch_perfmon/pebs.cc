#include "pmu/arch_perfmon/pebs.h"

#include <cstring>

namespace pmu::arch_perfmon {

std::array<std::byte, kPebsRecordSize> pebs_record(const PebsRegisters& r, uint64_t applicable,
                                                   uint64_t eventing_ip) {
  // In the record's order (pebs.h); data address, data source, latency and TSX tuning are 0.
  const std::array<uint64_t, kPebsRecordSize / 8> words = {
      r.rflags,   r.rip, r.rax, r.rbx, r.rcx,       r.rdx, r.rsi, r.rdi, r.rbp,
      r.rsp,      r.r8,  r.r9,  r.r10, r.r11,       r.r12, r.r13, r.r14, r.r15,
      applicable, 0,     0,     0,     eventing_ip, 0,     r.tsc};
  std::array<std::byte, kPebsRecordSize> bytes;
  std::memcpy(bytes.data(), words.data(), bytes.size());  // x86 guest: little-endian, as we are
  return bytes;
}

}  // namespace pmu::arch_perfmon
