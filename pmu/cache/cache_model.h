// A deterministic set-associative data-cache hierarchy (L1D, L2, optional L3, DRAM) that turns
// the loads of retired guest instructions into the DCache-miss facts LWP and NetBurst count
// (latency, data source, address). Geometry and latencies come from the CPU profile.
//
// Model: physically simple, architecturally honest. Each level is set-associative with true LRU
// replacement; a miss fills the line into every level below the one that hit (inclusive fill, no
// back-invalidation); stores allocate like loads (write-allocate) but are never reported as
// misses. Indexing uses the guest *linear* address: the guest's page tables do not change cache
// behaviour here (a documented simplification; the bundled guest maps user memory 1:1 per task).
// Latency of a miss = the latency of the level that hit (total, not incremental).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pmu/status.h"
#include "pmu/retired_instruction.h"
#include "pmu/state_archive.h"

namespace pmu::cache {

struct LevelGeometry {
  uint32_t size_bytes = 0;  // 0 = level absent (only L3 may be absent)
  uint32_t ways = 1;
  uint32_t latency_cycles = 0;  // load-to-use latency when this level supplies the data
};

struct Geometry {
  uint32_t line_size = 64;
  LevelGeometry l1d, l2, l3;
  uint32_t dram_latency_cycles = 200;
};

// Ok for a usable hierarchy, else refused with why it is not (sizes not a power-of-two
// multiple of ways x line, ...).
pmu::Status validate(const Geometry& g);

enum class Level : uint8_t { kL1, kL2, kL3, kDram };

struct AccessResult {
  Level level = Level::kL1;  // where the data came from
  uint32_t latency_cycles = 0;
};

class CacheModel {
 public:
  explicit CacheModel(const Geometry& geometry);  // geometry must validate

  // One access of `size` bytes at `address`. An access that spans two lines touches both and
  // reports the farther level (a misaligned load is one event, §4.3).
  AccessResult access(uint64_t address, uint32_t size, bool is_write);

  // The LWP view of a load: nullopt on an L1 hit, else the miss with the lowest missing address,
  // its total latency and its data source.
  std::optional<CacheMiss> load(uint64_t address, uint32_t size);

  void reset();
  const Geometry& geometry() const { return geometry_; }

  // Snapshot / migration (pmu/state_archive.h): the cache contents decide later DCache-miss
  // records, so a restored run must continue with the same lines and LRU stamps.
  template <class Archive>
  void archive(Archive& a) {
    a(l1_, l2_, l3_);
  }

 private:
  class SetAssociative {
   public:
    template <class Archive>
    void archive(Archive& a) {
      const uint32_t sets = sets_, ways = ways_;  // as the profile's geometry made them
      a(sets_, ways_, tags_, stamps_, clock_);
      if constexpr (Archive::kLoading) {
        // Lookups index tags_/stamps_ by (line % sets_) * ways_: a crafted blob must not move
        // that index past the arrays, nor make sets_ 0.
        // Empty arrays are a level nothing was filled into yet.
        const size_t entries = tags_.empty() ? 0 : size_t{sets} * ways;
        if (sets_ != sets || ways_ != ways || tags_.size() != entries || stamps_.size() != entries)
          throw StateFormatError("cache level state: " + std::to_string(sets_) + " sets x " +
                                 std::to_string(ways_) + " ways with " +
                                 std::to_string(tags_.size()) + " entries, the profile has " +
                                 std::to_string(sets) + " x " + std::to_string(ways));
      }
    }
    SetAssociative(const LevelGeometry& g, uint32_t line_size);
    bool present() const { return sets_ != 0; }
    bool lookup(uint64_t line);  // true on hit; updates LRU
    void fill(uint64_t line);    // inserts, evicting the least recently used way
    void reset();

   private:
    uint32_t sets_ = 0, ways_ = 0;
    // sets_ * ways_ each, allocated by the first fill(): a level no access reached costs neither
    // memory nor snapshot bytes (a VM that never profiles). Empty = every way invalid.
    std::vector<uint64_t> tags_;    // kEmpty when invalid
    std::vector<uint64_t> stamps_;  // last-use time per way
    uint64_t clock_ = 0;
  };

  AccessResult access_line(uint64_t line);

  Geometry geometry_;
  SetAssociative l1_, l2_, l3_;
};

}  // namespace pmu::cache
