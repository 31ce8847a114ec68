#include "pmu/cache/cache_model.h"

#include <algorithm>
#include <bit>
#include <limits>

namespace pmu::cache {
namespace {

constexpr uint64_t kEmpty = std::numeric_limits<uint64_t>::max();

std::optional<std::string> validate_level(const char* name, const LevelGeometry& l,
                                          uint32_t line_size, bool optional) {
  if (l.size_bytes == 0) {
    if (optional) return std::nullopt;
    return std::string(name) + " size must be > 0";
  }
  if (l.ways == 0) return std::string(name) + " must have at least one way";
  const uint64_t way_bytes = uint64_t{l.ways} * line_size;
  if (l.size_bytes % way_bytes != 0 || !std::has_single_bit(l.size_bytes / way_bytes))
    return std::string(name) + " size must be ways x line size x a power of two";
  return std::nullopt;
}

}  // namespace

pmu::Status validate(const Geometry& g) {
  if (g.line_size < 8 || !std::has_single_bit(g.line_size))
    return pmu::Status::refused("cache line size must be a power of two >= 8");
  if (auto e = validate_level("L1D", g.l1d, g.line_size, false)) return pmu::Status::refused(*e);
  if (auto e = validate_level("L2", g.l2, g.line_size, false)) return pmu::Status::refused(*e);
  if (auto e = validate_level("L3", g.l3, g.line_size, true)) return pmu::Status::refused(*e);
  const uint32_t l3 = g.l3.size_bytes ? g.l3.latency_cycles : g.l2.latency_cycles;
  if (!(g.l1d.latency_cycles <= g.l2.latency_cycles && g.l2.latency_cycles <= l3 &&
        l3 <= g.dram_latency_cycles))
    return pmu::Status::refused("cache latencies must not decrease from L1D to DRAM");
  return {};
}

CacheModel::SetAssociative::SetAssociative(const LevelGeometry& g, uint32_t line_size) {
  if (g.size_bytes == 0) return;
  ways_ = g.ways;
  sets_ = g.size_bytes / (g.ways * line_size);
}

bool CacheModel::SetAssociative::lookup(uint64_t line) {
  if (tags_.empty()) return false;  // nothing filled yet: every way is invalid
  const uint64_t base = (line % sets_) * ways_;
  for (uint32_t w = 0; w < ways_; ++w) {
    if (tags_[base + w] == line) {
      stamps_[base + w] = ++clock_;
      return true;
    }
  }
  return false;
}

void CacheModel::SetAssociative::fill(uint64_t line) {
  if (tags_.empty()) {
    tags_.assign(uint64_t{sets_} * ways_, kEmpty);
    stamps_.assign(tags_.size(), 0);
  }
  const uint64_t base = (line % sets_) * ways_;
  uint64_t victim = base;
  for (uint32_t w = 0; w < ways_; ++w) {
    if (tags_[base + w] == kEmpty) {  // prefer an invalid way, lowest first
      victim = base + w;
      break;
    }
    if (stamps_[base + w] < stamps_[victim]) victim = base + w;
  }
  tags_[victim] = line;
  stamps_[victim] = ++clock_;
}

void CacheModel::SetAssociative::reset() {
  tags_ = {};
  stamps_ = {};
  clock_ = 0;
}

CacheModel::CacheModel(const Geometry& geometry)
    : geometry_(geometry),
      l1_(geometry.l1d, geometry.line_size),
      l2_(geometry.l2, geometry.line_size),
      l3_(geometry.l3, geometry.line_size) {}

AccessResult CacheModel::access_line(uint64_t line) {
  if (l1_.lookup(line)) return {Level::kL1, geometry_.l1d.latency_cycles};
  AccessResult r;
  if (l2_.lookup(line)) {
    r = {Level::kL2, geometry_.l2.latency_cycles};
  } else if (l3_.present() && l3_.lookup(line)) {
    r = {Level::kL3, geometry_.l3.latency_cycles};
  } else {
    r = {Level::kDram, geometry_.dram_latency_cycles};
    if (l3_.present()) l3_.fill(line);
  }
  if (r.level != Level::kL2) l2_.fill(line);
  l1_.fill(line);
  return r;
}

AccessResult CacheModel::access(uint64_t address, uint32_t size, bool /*is_write*/) {
  const uint64_t first = address / geometry_.line_size;
  const uint64_t last = (address + std::max<uint32_t>(size, 1) - 1) / geometry_.line_size;
  AccessResult worst = access_line(first);
  if (last != first) {
    AccessResult second = access_line(last);
    if (second.level > worst.level) worst = second;
  }
  return worst;
}

std::optional<CacheMiss> CacheModel::load(uint64_t address, uint32_t size) {
  const uint64_t first = address / geometry_.line_size;
  const uint64_t last = (address + std::max<uint32_t>(size, 1) - 1) / geometry_.line_size;
  const AccessResult a = access_line(first);
  AccessResult b = a;
  if (last != first) b = access_line(last);
  if (a.level == Level::kL1 && b.level == Level::kL1) return std::nullopt;
  // The lowest address that missed (§4.3): the first line if it missed, else the second.
  const bool first_missed = a.level != Level::kL1;
  const AccessResult& farthest = b.level > a.level ? b : a;
  CacheMiss miss;
  miss.data_address = first_missed ? address : last * geometry_.line_size;
  miss.latency_cycles = farthest.latency_cycles;
  switch (farthest.level) {
    case Level::kL2: miss.source = DataSource::kL2; break;
    case Level::kL3: miss.source = DataSource::kLocalL3; break;
    default: miss.source = DataSource::kDram; break;
  }
  return miss;
}

void CacheModel::reset() {
  l1_.reset();
  l2_.reset();
  l3_.reset();
}

}  // namespace pmu::cache
