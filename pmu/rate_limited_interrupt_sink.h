// Interrupt-storm protection (perfmon2 §4.4.4 suggests limiting by time, not by event count):
// wraps the sink of one vCPU so that a guest cannot make the VMM deliver more than
// `max_per_second` interrupts (threshold vectors, NMIs and PMIs together) in ANY one-second
// interval — a sliding window over the last `max_per_second` delivery times. An interrupt over
// the limit is not lost: it is held, coalesced with others of the same kind (as an edge-triggered
// line would), and delivered by poll() as soon as the window allows. The VMM calls poll() on
// every exit of the vCPU, and wakes a halted vCPU at next_release_ns(). 0 disables the limit.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "pmu/clock.h"
#include "pmu/interrupt_sink.h"
#include "pmu/state_archive.h"

namespace pmu {

class RateLimitedInterruptSink : public InterruptSink {
 public:
  // The window keeps one time per allowed interrupt (8 bytes each, per vCPU): the limit a
  // command line or a snapshot may ask for. No guest needs a million interrupts per second.
  static constexpr uint32_t kMaxLimit = 1'000'000;

  // `max_per_second` above kMaxLimit is a programming error (callers check their input).
  RateLimitedInterruptSink(InterruptSink& inner, Clock& clock, uint32_t max_per_second);

  void deliver_vector(uint8_t vector) override;
  void deliver_nmi() override;
  void raise_performance_interrupt() override;

  // Delivers held interrupts the window now allows. Returns how many were delivered.
  int poll();

  uint64_t delivered() const { return delivered_; }
  uint64_t throttled() const { return throttled_; }  // requests held back (coalesced or later)
  // Held-back requests folded into an interrupt of the same kind (or vector) that was already
  // held: they never get a delivery of their own. Every request is delivered, coalesced or still
  // held, so requests = delivered() + coalesced() + (held now: at most one per kind and vector).
  uint64_t coalesced() const { return coalesced_; }
  bool has_pending() const;
  // When held interrupts exist: the Clock time at which poll() can deliver the first of them
  // (the oldest delivery in the window leaves it). nullopt when nothing is held. A VMM whose vCPU
  // can sit in a halt without exiting uses this to wake it at that time (machine.cc).
  std::optional<uint64_t> next_release_ns() const;

  // Snapshot / migration: what is held and the counts. The delivery-time history is steady-clock
  // time of this process and means nothing elsewhere: a restored limiter starts a fresh window.
  // The version of what archive() saves: bump it with any change to that (snapshot sections,
  // vmm/snapshot/state_sections.h).
  static constexpr uint16_t kStateVersion = 1;
  template <class Archive>
  void archive(Archive& a) {
    a(pending_[kNmi], pending_[kPmi], pending_vectors_, delivered_, throttled_, coalesced_);
    if constexpr (Archive::kLoading) check_loaded();
  }

  // The vectors held now, in arrival order (restore checks them against the CPU profile).
  const std::vector<uint8_t>& held_vectors() const { return pending_vectors_; }
  bool holds_nmi_or_pmi() const { return pending_[kNmi] || pending_[kPmi]; }

 private:
  enum Kind { kNmi, kPmi, kKinds };
  bool take_slot();  // true when one more delivery fits in the window now
  // A loaded state holds only what a guest could have made it hold (StateFormatError if not).
  void check_loaded() const;
  void deliver_now(int kind, uint8_t vector);

  InterruptSink& inner_;
  Clock& clock_;
  const uint32_t limit_;
  std::vector<uint64_t> history_;  // ring of the last `limit_` delivery times
  size_t next_ = 0;
  bool pending_[kKinds] = {};
  std::vector<uint8_t> pending_vectors_;  // distinct vectors held, in arrival order
  uint64_t delivered_ = 0, throttled_ = 0, coalesced_ = 0;
};

}  // namespace pmu
