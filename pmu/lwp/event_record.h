// Byte-exact LWP event records (proposal §4, Figures 1–4): 32 bytes, little-endian, reserved
// bytes zero. Encoders for the model, a decoder for tools, traces and tests.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "pmu/retired_instruction.h"

namespace pmu::lwp {

using EventRecordBytes = std::array<std::byte, 32>;

// Latency as a DCache record reports it (§4.3.1): rounded down to a multiple of 16 and capped
// (saturating) at `max_latency` = 2^n - 16.
uint32_t reported_latency(uint32_t cycles, uint32_t max_latency);

// Figure 4 data-source encoding of a DataSource (kL2 has none: 0).
uint8_t data_source_code(DataSource source);

EventRecordBytes encode_instructions_retired(uint8_t core_id, uint64_t rip);
EventRecordBytes encode_branch_retired(uint8_t core_id, uint64_t rip, const BranchInfo& branch);
// `data_address_supported` is CPUID ECX bit 5: without it bit 28 is 0 and bytes 16:23 are zero.
EventRecordBytes encode_dcache_miss(uint8_t core_id, uint64_t rip, const CacheMiss& miss,
                                    bool data_address_supported, uint32_t max_latency);

// The fields of any record (Figure 1).
struct DecodedRecord {
  uint8_t event_id = 0;
  uint8_t core_id = 0;
  uint16_t flags = 0;     // bytes 2:3, i.e. bits 16:31 of the first dword, shifted down by 16
  uint32_t data = 0;      // bytes 4:7
  uint64_t rip = 0;       // bytes 8:15
  uint64_t address = 0;   // bytes 16:23
  uint64_t reserved = 0;  // bytes 24:31
  bool operator==(const DecodedRecord&) const = default;
};
DecodedRecord decode_record(const EventRecordBytes& bytes);

}  // namespace pmu::lwp
