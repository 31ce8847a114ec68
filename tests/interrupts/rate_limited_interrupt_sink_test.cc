// Storm protection: never more than N deliveries in any one-second interval, nothing lost
// (held interrupts are coalesced per kind and delivered when the window allows).
#include "pmu/rate_limited_interrupt_sink.h"

#include <gtest/gtest.h>

#include "pmu/state_archive.h"
#include "tests/support/recording_interrupt_sink.h"

namespace pmu {
namespace {

struct FakeClock : Clock {
  uint64_t ns = 1'000'000'000;  // not 0: a real monotonic clock is rarely 0
  uint64_t now_ns() override { return ns; }
};

TEST(RateLimitTest, DeliversUpToTheLimitThenHolds) {
  testing::RecordingInterruptSink inner;
  FakeClock clock;
  RateLimitedInterruptSink sink(inner, clock, 3);
  for (int i = 0; i < 10; ++i) sink.deliver_vector(0x40);
  EXPECT_EQ(inner.vectors.size(), 3u);
  EXPECT_EQ(sink.throttled(), 7u);
  EXPECT_EQ(sink.coalesced(), 6u);  // the first held one waits, six more fold into it
  EXPECT_TRUE(sink.has_pending());
  clock.ns += 999'999'999;
  EXPECT_EQ(sink.poll(), 0);  // still inside the window of the first delivery
  clock.ns += 1;
  EXPECT_EQ(sink.poll(), 1);  // the 7 held ones were coalesced into one
  EXPECT_EQ(inner.vectors.size(), 4u);
  EXPECT_FALSE(sink.has_pending());
  EXPECT_EQ(sink.delivered() + sink.coalesced(), 10u);  // every request accounted for
}

TEST(RateLimitTest, NextReleaseIsWhenTheOldestDeliveryLeavesTheWindow) {
  testing::RecordingInterruptSink inner;
  FakeClock clock;
  RateLimitedInterruptSink sink(inner, clock, 2);
  EXPECT_FALSE(sink.next_release_ns().has_value());  // nothing held
  const uint64_t first = clock.ns;
  sink.deliver_nmi();
  clock.ns += 300'000'000;
  sink.deliver_nmi();
  EXPECT_FALSE(sink.next_release_ns().has_value());  // both delivered
  clock.ns += 100'000'000;
  sink.deliver_nmi();  // held
  ASSERT_TRUE(sink.next_release_ns().has_value());
  EXPECT_EQ(*sink.next_release_ns(), first + 1'000'000'000);
  clock.ns = *sink.next_release_ns() - 1;
  EXPECT_EQ(sink.poll(), 0);
  clock.ns += 1;
  EXPECT_EQ(sink.poll(), 1);
  EXPECT_FALSE(sink.next_release_ns().has_value());
}

TEST(RateLimitTest, SlidingWindowBoundsAnyOneSecondInterval) {
  testing::RecordingInterruptSink inner;
  FakeClock clock;
  RateLimitedInterruptSink sink(inner, clock, 4);
  std::vector<uint64_t> times;
  // Requests every 100 ms for 5 s: at most 4 in any 1 s interval.
  for (int i = 0; i < 50; ++i) {
    const size_t before = inner.vectors.size();
    sink.deliver_vector(0x41);
    if (inner.vectors.size() > before) times.push_back(clock.ns);
    clock.ns += 100'000'000;
  }
  for (size_t i = 4; i < times.size(); ++i) EXPECT_GE(times[i] - times[i - 4], 1'000'000'000u);
  EXPECT_GE(times.size(), 20u);
}

TEST(RateLimitTest, KindsAreHeldSeparatelyAndDistinctVectorsKept) {
  testing::RecordingInterruptSink inner;
  FakeClock clock;
  RateLimitedInterruptSink sink(inner, clock, 1);
  sink.deliver_vector(0x40);
  sink.deliver_vector(0x41);
  sink.deliver_vector(0x41);
  sink.deliver_nmi();
  sink.raise_performance_interrupt();
  EXPECT_EQ(inner.vectors, std::vector<uint8_t>{0x40});
  for (int s = 0; s < 3; ++s) {
    clock.ns += 1'000'000'000;
    sink.poll();
  }
  EXPECT_EQ(inner.nmis, 1);
  EXPECT_EQ(inner.pmis, 1);
  clock.ns += 1'000'000'000;
  sink.poll();
  EXPECT_EQ(inner.vectors, (std::vector<uint8_t>{0x40, 0x41}));
  EXPECT_FALSE(sink.has_pending());
  EXPECT_EQ(sink.coalesced(), 1u);  // the second 0x41 only; other kinds and vectors are kept apart
}

TEST(RateLimitTest, ZeroMeansUnlimited) {
  testing::RecordingInterruptSink inner;
  FakeClock clock;
  RateLimitedInterruptSink sink(inner, clock, 0);
  for (int i = 0; i < 1000; ++i) sink.deliver_vector(0x40);
  EXPECT_EQ(inner.vectors.size(), 1000u);
  EXPECT_EQ(sink.throttled(), 0u);
}

// A held state from a snapshot or migration stream holds only what a guest could have made
// this limiter hold: distinct vectors from 16 up (LWPMSR0 refuses lower ones), and nothing at all
// without a limit (nothing is ever held then). Anything else is refused, not delivered later.
TEST(RateLimitTest, LoadedStateHoldsOnlyWhatAGuestCouldHaveAsked) {
  testing::RecordingInterruptSink inner;
  FakeClock clock;
  auto saved = [](std::vector<uint8_t> vectors, bool nmi) {
    StateWriter w;
    bool pending[2] = {nmi, false};
    uint64_t delivered = 0, throttled = 0, coalesced = 0;
    w(pending[0], pending[1], vectors, delivered, throttled, coalesced);
    return w.take();
  };
  auto load = [&](uint32_t limit, std::vector<uint8_t> vectors, bool nmi) -> std::string {
    RateLimitedInterruptSink sink(inner, clock, limit);
    try {
      const std::vector<std::byte> bytes = saved(std::move(vectors), nmi);
      StateReader r(bytes);
      r(sink);
      r.expect_end();
      return "";
    } catch (const StateFormatError& e) {
      return e.what();
    }
  };
  EXPECT_EQ(load(10, {0x40, 0xF0}, true), "");
  EXPECT_EQ(load(10, {0x40, 0x0E}, false),
            "rate limiter: held vector 0xe is an exception vector (below 16)");
  EXPECT_EQ(load(10, {0x40, 0x41, 0x40}, false), "rate limiter: vector 0x40 is held twice");
  EXPECT_EQ(load(0, {0x40}, false), "rate limiter: interrupts held without a limit");
  EXPECT_EQ(load(0, {}, true), "rate limiter: interrupts held without a limit");
  EXPECT_EQ(load(0, {}, false), "");
}

}  // namespace
}  // namespace pmu
