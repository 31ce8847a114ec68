// libFuzzer target for the model state a snapshot or a migration stream carries (DESIGN §4.12:
// anyone can recompute the CRCs): bytes are loaded into a cache model or the branch predictor
// through pmu/state_archive.h, and a model that accepted them is then used. Build and run with
// tests/fuzz/run_fuzzer.sh model_state_fuzz (clang, -fsanitize=fuzzer,address,undefined).
//
// Input: byte 0 picks the model (odd: cache model with a 4 KiB 2-way L1D and a 16 KiB 4-way L2;
// bit 1 set: the interrupt rate limiter, allowing 2 per second; else the branch predictor); the
// rest is its archive. Checked: no crash and no sanitizer report, whether the bytes are refused
// (StateFormatError) or accepted and the model is used (accesses over 64 pages; calls, returns
// and conditional branches; the limiter's held interrupts released, each vector once and none
// below 16, and more requests).
// Seeds (corpus_model_state/): StateWriter output of a cache model after 64 line loads, of a
// predictor after four calls and of a limiter holding two vectors and a PMI.
#include <cstddef>
#include <cstdint>
#include <span>

#include "pmu/branch/branch_predictor.h"
#include "pmu/cache/cache_model.h"
#include "pmu/rate_limited_interrupt_sink.h"
#include "pmu/state_archive.h"

namespace {

struct StepClock : pmu::Clock {
  uint64_t ns = 1;
  uint64_t now_ns() override { return ns += 400'000'000; }
};

// Whatever a loaded limiter releases must be what a guest could have asked for.
struct CheckingSink : pmu::InterruptSink {
  bool seen[256] = {};
  void deliver_vector(uint8_t vector) override {
    if (vector < 16) __builtin_trap();
    seen[vector] = true;
  }
  void deliver_nmi() override {}
  void raise_performance_interrupt() override {}
};

template <typename Model>
bool load(Model& model, std::span<const std::byte> bytes) {
  try {
    pmu::StateReader r(bytes);
    r(model);
    r.expect_end();
    return true;
  } catch (const pmu::StateFormatError&) {
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  if (data[0] & 1) {
    pmu::cache::Geometry g;
    g.l1d = {4096, 2, 4};
    g.l2 = {16384, 4, 12};
    pmu::cache::CacheModel model(g);
    if (!load(model, bytes)) return 0;
    for (uint64_t a = 0; a < 64 * 4096; a += 4093) model.access(a, 8, (a & 1) != 0);
  } else if (data[0] & 2) {
    CheckingSink inner;
    StepClock clock;
    pmu::RateLimitedInterruptSink model(inner, clock, 2);
    if (!load(model, bytes)) return 0;
    for (int i = 0; i < 2000 && model.has_pending(); ++i) model.poll();
    if (model.has_pending()) __builtin_trap();  // everything held goes out in time
    model.deliver_vector(0x40);
    model.raise_performance_interrupt();
  } else {
    pmu::branch::BranchPredictor model;
    if (!load(model, bytes)) return 0;
    for (uint64_t i = 0; i < 64; ++i) {
      model.resolve(pmu::BranchKind::kCall, true, 0x1000 + i * 16, 0x1005 + i * 16, 0x2000);
      model.resolve(pmu::BranchKind::kReturn, false, 0x2000, 0x2001, 0x1005 + i * 16);
      model.resolve(pmu::BranchKind::kConditional, true, 0x3000 + i, 0x3002 + i, 0x3100);
    }
  }
  return 0;
}
