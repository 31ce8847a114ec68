#include "pmu/lwp/event_record.h"

#include <algorithm>

#include "pmu/lwp/architecture.h"

namespace pmu::lwp {
namespace {

void put_le(EventRecordBytes& r, uint32_t offset, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) r[offset + i] = static_cast<std::byte>(value >> (8 * i));
}

uint64_t get_le(const EventRecordBytes& r, uint32_t offset, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(r[offset + i]) << (8 * i);
  return v;
}

// Figure 1: byte 0 EventId, byte 1 CoreId, bits 16:31 flags — one little-endian dword.
EventRecordBytes header(uint8_t event_id, uint8_t core_id, uint32_t flags, uint64_t rip) {
  EventRecordBytes r{};  // reserved bytes are zero (§4)
  put_le(r, record::kFlags, flags | (uint32_t{core_id} << 8) | event_id, 4);
  put_le(r, record::kRip, rip, 8);
  return r;
}

}  // namespace

uint32_t reported_latency(uint32_t cycles, uint32_t max_latency) {
  return std::min(cycles & ~15u, max_latency);
}

uint8_t data_source_code(DataSource source) {
  switch (source) {
    case DataSource::kLocalL3: return 1;
    case DataSource::kRemoteCache: return 2;
    case DataSource::kDram: return 3;
    case DataSource::kOther: return 7;
    case DataSource::kNoValidStatus:
    case DataSource::kL2: return 0;
  }
  return 0;
}

EventRecordBytes encode_instructions_retired(uint8_t core_id, uint64_t rip) {
  return header(kEventInstructionsRetired, core_id, 0, rip);
}

EventRecordBytes encode_branch_retired(uint8_t core_id, uint64_t rip, const BranchInfo& branch) {
  uint32_t flags = 0;
  if (branch.taken) flags |= record::kBranchTaken;
  if (branch.prediction_valid) {
    flags |= record::kBranchPredictionValid;
    if (branch.predicted_correctly) flags |= record::kBranchPredicted;
  }
  EventRecordBytes r = header(kEventBranchesRetired, core_id, flags, rip);
  put_le(r, record::kAddress, branch.next_rip, 8);
  return r;
}

EventRecordBytes encode_dcache_miss(uint8_t core_id, uint64_t rip, const CacheMiss& miss,
                                    bool data_address_supported, uint32_t max_latency) {
  uint32_t flags = uint32_t{data_source_code(miss.source)} << record::kDcacheSourceShift;
  if (data_address_supported) flags |= record::kDcacheAddressValid;
  EventRecordBytes r = header(kEventDcacheMisses, core_id, flags, rip);
  put_le(r, record::kData, reported_latency(miss.latency_cycles, max_latency), 4);
  if (data_address_supported) put_le(r, record::kAddress, miss.data_address, 8);
  return r;
}

DecodedRecord decode_record(const EventRecordBytes& bytes) {
  DecodedRecord d;
  const uint32_t dword0 = static_cast<uint32_t>(get_le(bytes, 0, 4));
  d.event_id = static_cast<uint8_t>(dword0);
  d.core_id = static_cast<uint8_t>(dword0 >> 8);
  d.flags = static_cast<uint16_t>(dword0 >> 16);
  d.data = static_cast<uint32_t>(get_le(bytes, record::kData, 4));
  d.rip = get_le(bytes, record::kRip, 8);
  d.address = get_le(bytes, record::kAddress, 8);
  d.reserved = get_le(bytes, record::kReserved, 8);
  return d;
}

}  // namespace pmu::lwp
