#include "pmu/netburst/save_state.h"

#include <cstring>

#include "pmu/netburst/cccr.h"
#include "pmu/netburst/escr.h"

namespace pmu::netburst {
namespace {

constexpr char kMagic[4] = {'N', 'B', 'P', 'S'};
constexpr size_t kHeaderSize = 4 + 2 + 1 + 1 + 4 + 4 + 4;
constexpr size_t kPerCounter = 8 + 4;
constexpr size_t kEscrPart = 1 + kEscrCount * 4;

void put(std::vector<std::byte>& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  uint64_t get(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(in_[pos_ + i]) << (8 * i);
    pos_ += n;
    return v;
  }

 private:
  std::span<const std::byte> in_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<std::byte> serialize(const PmuState& s) {
  std::vector<std::byte> out;
  const int n = s.counter_count <= kMaxCounters ? s.counter_count : kMaxCounters;
  out.reserve(kHeaderSize + n * kPerCounter + kEscrPart);
  for (char c : kMagic) out.push_back(static_cast<std::byte>(c));
  put(out, kStateFormatVersion, 2);
  put(out, static_cast<uint64_t>(n), 1);
  put(out, s.counter_bits, 1);
  put(out, 0, 4);
  put(out, s.pending_pmi, 4);
  put(out, s.edge_previous, 4);
  for (int i = 0; i < n; ++i) {
    put(out, s.counters[i], 8);
    put(out, s.cccrs[i], 4);
  }
  put(out, kEscrCount, 1);
  for (uint32_t e : s.escrs) put(out, e, 4);
  return out;
}

pmu::Result<PmuState> deserialize(std::span<const std::byte> bytes) {
  if (bytes.size() < 6)
    return pmu::Status::refused("NetBurst PMU state truncated: " + std::to_string(bytes.size()) +
                                " bytes");
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    return pmu::Status::refused(std::string("not a NetBurst PMU state (bad magic)"));
  Reader r(bytes.subspan(4));
  const uint64_t version = r.get(2);
  if (version != kStateFormatVersion)
    return pmu::Status::refused("unsupported NetBurst PMU state version " +
                                std::to_string(version) + " (this build reads version " +
                                std::to_string(kStateFormatVersion) + ")");
  if (bytes.size() < kHeaderSize)
    return pmu::Status::refused("NetBurst PMU state truncated: " + std::to_string(bytes.size()) +
                                " bytes, header needs " + std::to_string(kHeaderSize));
  PmuState s;
  const uint64_t count = r.get(1);
  const uint64_t bits = r.get(1);
  const uint64_t flags = r.get(4);
  if (count > kMaxCounters)
    return pmu::Status::refused("NetBurst PMU state has " + std::to_string(count) +
                                " counters (at most 18)");
  if (bits < 32 || bits > 40)
    return pmu::Status::refused("NetBurst PMU state has " + std::to_string(bits) +
                                "-bit counters (32..40 allowed)");
  if (flags != 0) return pmu::Status::refused(std::string("NetBurst PMU state has unknown flags"));
  const size_t expected = kHeaderSize + count * kPerCounter + kEscrPart;
  if (bytes.size() != expected)
    return pmu::Status::refused(
        "NetBurst PMU state size mismatch: " + std::to_string(bytes.size()) + " bytes, expected " +
        std::to_string(expected));
  s.counter_count = static_cast<uint8_t>(count);
  s.counter_bits = static_cast<uint8_t>(bits);
  s.pending_pmi = static_cast<uint32_t>(r.get(4));
  s.edge_previous = static_cast<uint32_t>(r.get(4));
  const uint32_t live = count == 0 ? 0u : ((1u << count) - 1u);
  if ((s.pending_pmi & ~live) || (s.edge_previous & ~live))
    return pmu::Status::refused(std::string("NetBurst PMU state flags counters that do not exist"));
  const uint64_t counter_mask = (uint64_t{1} << bits) - 1;
  for (uint64_t i = 0; i < count; ++i) {
    s.counters[i] = r.get(8);
    s.cccrs[i] = static_cast<uint32_t>(r.get(4));
    if (s.counters[i] & ~counter_mask)
      return pmu::Status::refused("NetBurst PMU state: counter " + std::to_string(i) +
                                  " wider than " + std::to_string(bits) + " bits");
    if (s.cccrs[i] & cccr::kReserved)
      return pmu::Status::refused("NetBurst PMU state: CCCR " + std::to_string(i) +
                                  " has reserved bits set");
  }
  if (r.get(1) != kEscrCount)
    return pmu::Status::refused(std::string("NetBurst PMU state: wrong ESCR count"));
  for (int i = 0; i < kEscrCount; ++i) {
    s.escrs[i] = static_cast<uint32_t>(r.get(4));
    if (s.escrs[i] & escr::kReserved)
      return pmu::Status::refused(std::string("NetBurst PMU state: ") +
                                  std::string(escr_table()[i].name) + " has reserved bits set");
  }
  return s;
}

}  // namespace pmu::netburst
