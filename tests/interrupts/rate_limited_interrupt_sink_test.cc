// Storm protection: never more than N deliveries in any one-second interval, nothing lost
// (held interrupts are coalesced per kind and delivered when the window allows).
#include "pmu/rate_limited_interrupt_sink.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace pmu
