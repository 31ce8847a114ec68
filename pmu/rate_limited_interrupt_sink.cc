#include "pmu/rate_limited_interrupt_sink.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace pmu {
namespace {
constexpr uint64_t kWindowNs = 1'000'000'000;
}

RateLimitedInterruptSink::RateLimitedInterruptSink(InterruptSink& inner, Clock& clock,
                                                   uint32_t max_per_second)
    : inner_(inner), clock_(clock), limit_(max_per_second) {
  if (max_per_second > kMaxLimit)
    throw std::invalid_argument("interrupt rate limit " + std::to_string(max_per_second) +
                                " is over " + std::to_string(kMaxLimit));
  history_.assign(max_per_second, 0);
}

bool RateLimitedInterruptSink::take_slot() {
  if (limit_ == 0) return true;
  const uint64_t now = clock_.now_ns();
  // history_[next_] is the oldest of the last `limit_` deliveries (0 = never used).
  const uint64_t oldest = history_[next_];
  if (delivered_ >= limit_ && now - oldest < kWindowNs) return false;
  history_[next_] = now;
  next_ = (next_ + 1) % history_.size();
  return true;
}

void RateLimitedInterruptSink::deliver_now(int kind, uint8_t vector) {
  ++delivered_;
  if (kind == kNmi)
    inner_.deliver_nmi();
  else if (kind == kPmi)
    inner_.raise_performance_interrupt();
  else
    inner_.deliver_vector(vector);
}

void RateLimitedInterruptSink::deliver_vector(uint8_t vector) {
  poll();  // older held interrupts go first
  if (pending_vectors_.empty() && take_slot()) return deliver_now(kKinds, vector);
  ++throttled_;
  if (std::find(pending_vectors_.begin(), pending_vectors_.end(), vector) == pending_vectors_.end())
    pending_vectors_.push_back(vector);
  else
    ++coalesced_;
}

void RateLimitedInterruptSink::deliver_nmi() {
  poll();
  if (!pending_[kNmi] && take_slot()) return deliver_now(kNmi, 0);
  ++throttled_;
  if (pending_[kNmi]) ++coalesced_;
  pending_[kNmi] = true;
}

void RateLimitedInterruptSink::raise_performance_interrupt() {
  poll();
  if (!pending_[kPmi] && take_slot()) return deliver_now(kPmi, 0);
  ++throttled_;
  if (pending_[kPmi]) ++coalesced_;
  pending_[kPmi] = true;
}

int RateLimitedInterruptSink::poll() {
  int n = 0;
  for (int kind : {kNmi, kPmi}) {
    if (pending_[kind] && take_slot()) {
      pending_[kind] = false;
      deliver_now(kind, 0);
      ++n;
    }
  }
  while (!pending_vectors_.empty() && take_slot()) {
    const uint8_t v = pending_vectors_.front();
    pending_vectors_.erase(pending_vectors_.begin());
    deliver_now(kKinds, v);
    ++n;
  }
  return n;
}

void RateLimitedInterruptSink::check_loaded() const {
  if (limit_ == 0 && has_pending())
    throw StateFormatError("rate limiter: interrupts held without a limit");
  bool seen[256] = {};
  for (const uint8_t v : pending_vectors_) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "%#x", v);
    // LWPMSR0 with INT refuses a vector below 16 (DESIGN §4.1): none can have been requested.
    if (v < 16)
      throw StateFormatError(std::string("rate limiter: held vector ") + hex +
                             " is an exception vector (below 16)");
    if (seen[v])
      throw StateFormatError(std::string("rate limiter: vector ") + hex + " is held twice");
    seen[v] = true;
  }
}

bool RateLimitedInterruptSink::has_pending() const {
  return pending_[kNmi] || pending_[kPmi] || !pending_vectors_.empty();
}

std::optional<uint64_t> RateLimitedInterruptSink::next_release_ns() const {
  if (!has_pending()) return std::nullopt;
  if (limit_ == 0 || delivered_ < limit_) return clock_.now_ns();  // a slot is free now
  return history_[next_] + kWindowNs;
}

}  // namespace pmu
