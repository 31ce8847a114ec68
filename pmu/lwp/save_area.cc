#include "pmu/lwp/save_area.h"

#include <cstring>

namespace pmu::lwp {
namespace {

// Format, version 1 (little-endian):
//   "LWPS" | u16 version | u16 counter_count | u64 lwpmsr0 | u64 lwpcb_address | u32 head_offset |
//   u8 missed_pending | u8 pending | u16 zero | u64 prng_state | u32 active_slots |
//   u32 counters[counter_count]
constexpr char kMagic[4] = {'L', 'W', 'P', 'S'};
constexpr size_t kFixedSize = 4 + 2 + 2 + 8 + 8 + 4 + 1 + 1 + 2 + 8 + 4;

class Writer {
 public:
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  void le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<std::byte>(v >> (8 * i)));
  }
  std::vector<std::byte> take() { return std::move(out_); }

 private:
  std::vector<std::byte> out_;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  uint64_t le(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(in_[pos_ + i]) << (8 * i);
    pos_ += n;
    return v;
  }
  size_t remaining() const { return in_.size() - pos_; }

 private:
  std::span<const std::byte> in_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<std::byte> serialize(const UnitState& state) {
  const SaveArea& sa = state.save_area;
  Writer w;
  w.bytes(kMagic, sizeof kMagic);
  w.le(kSaveAreaFormatVersion, 2);
  w.le(sa.counter_count, 2);
  w.le(state.lwpmsr0, 8);
  w.le(sa.lwpcb_address, 8);
  w.le(sa.head_offset, 4);
  w.le(sa.missed_pending ? 1 : 0, 1);
  w.le(static_cast<uint8_t>(sa.pending), 1);
  w.le(0, 2);
  w.le(sa.prng_state, 8);
  w.le(sa.active_slots, 4);
  for (uint8_t i = 0; i < sa.counter_count && i < kMaxEventSlots; ++i) w.le(sa.counters[i], 4);
  return w.take();
}

pmu::Result<UnitState> deserialize(std::span<const std::byte> bytes) {
  if (bytes.size() < 6)
    return pmu::Status::refused(std::string("LWP save area truncated: ") +
                                std::to_string(bytes.size()) + " bytes, header needs " +
                                std::to_string(kFixedSize));
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    return pmu::Status::refused(std::string("not an LWP save area (bad magic)"));
  Reader r(bytes.subspan(4));
  const uint64_t version = r.le(2);
  if (version != kSaveAreaFormatVersion)
    return pmu::Status::refused("unsupported LWP save-area version " + std::to_string(version) +
                                " (this build reads version " +
                                std::to_string(kSaveAreaFormatVersion) + ")");
  if (bytes.size() < kFixedSize)
    return pmu::Status::refused("LWP save area truncated: " + std::to_string(bytes.size()) +
                                " bytes, header needs " + std::to_string(kFixedSize));
  UnitState state;
  SaveArea& sa = state.save_area;
  const uint64_t count = r.le(2);
  if (count > kMaxEventSlots)
    return pmu::Status::refused("LWP save area has " + std::to_string(count) +
                                " counters (at most " + std::to_string(kMaxEventSlots) + ")");
  sa.counter_count = static_cast<uint8_t>(count);
  state.lwpmsr0 = r.le(8);
  sa.lwpcb_address = r.le(8);
  sa.head_offset = static_cast<uint32_t>(r.le(4));
  const uint64_t missed = r.le(1);
  const uint64_t pending = r.le(1);
  const uint64_t zero = r.le(2);
  if (missed > 1 || pending > static_cast<uint8_t>(PendingInit::kRestore) || zero != 0)
    return pmu::Status::refused(std::string("LWP save area has invalid flag bytes"));
  sa.missed_pending = missed == 1;
  sa.pending = static_cast<PendingInit>(pending);
  sa.prng_state = r.le(8);
  sa.active_slots = static_cast<uint32_t>(r.le(4));
  if (count < 32 && (sa.active_slots >> count) != 0)
    return pmu::Status::refused(
        std::string("LWP save area marks slots active beyond its counter count"));
  if (r.remaining() != count * 4)
    return pmu::Status::refused("LWP save area size mismatch: " + std::to_string(r.remaining()) +
                                " bytes of counters, expected " + std::to_string(count * 4));
  for (uint64_t i = 0; i < count; ++i) sa.counters[i] = static_cast<uint32_t>(r.le(4));
  return state;
}

}  // namespace pmu::lwp
