// A profile's cache description (cpu_profile.h) as the cache model's geometry (pmu/cache): what
// the steppers' models are built with, and so what a snapshot's stepper state was saved with.
#pragma once

#include "pmu/cache/cache_model.h"
#include "vmm/cpu/cpu_profile.h"

namespace vmm {

inline pmu::cache::Geometry cache_model_geometry(const CacheGeometry& g) {
  auto level = [](const CacheLevel& l) {
    return pmu::cache::LevelGeometry{l.size_kib * 1024, l.ways, l.latency_cycles};
  };
  pmu::cache::Geometry out;
  out.line_size = g.line_size;
  out.l1d = level(g.l1d);
  out.l2 = level(g.l2);
  if (g.l3) out.l3 = level(*g.l3);
  out.dram_latency_cycles = g.dram_latency_cycles;
  return out;
}

}  // namespace vmm
