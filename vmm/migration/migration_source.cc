#include "vmm/migration/migration_source.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "vmm/migration/migration_channel.h"
#include "vmm/snapshot/little_endian.h"

namespace vmm {
namespace {

constexpr uint64_t kPage = 4096;

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

bool all_zero(const std::byte* p) {
  static const std::byte zero[kPage] = {};
  return std::memcmp(p, zero, kPage) == 0;
}

// Sends `pages` (guest-physical page numbers) in kPages frames.
void send_pages(MigrationChannel& ch, GuestRam& ram, const std::vector<uint64_t>& pages) {
  std::vector<std::byte> frame;
  for (size_t first = 0; first < pages.size(); first += kPagesPerMessage) {
    const size_t n = std::min<size_t>(kPagesPerMessage, pages.size() - first);
    frame.clear();
    frame.reserve(4 + n * (8 + kPage));
    append_le(frame, n, 4);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t gpa = pages[first + i] * kPage;
      const std::byte* p = ram.host(gpa, kPage);
      if (!p) throw MigrationError("dirty page outside RAM");  // cannot happen: KVM's slots
      append_le(frame, gpa, 8);
      frame.insert(frame.end(), p, p + kPage);
    }
    ch.send(MigrationMessage::kPages, frame);
  }
}

std::vector<uint64_t> nonzero_pages(GuestRam& ram) {
  std::vector<uint64_t> pages;
  for (const GuestRam::Region& r : ram.regions())
    for (uint64_t off = 0; off < r.size; off += kPage)
      if (!all_zero(r.host + off)) pages.push_back((r.gpa + off) / kPage);
  return pages;
}

}  // namespace

MigrationOutcome migrate_to(const std::string& path, MigratableVm& vm,
                            const MigrationLimits& limits) {
  MigrationOutcome out;
  const auto start = Clock::now();
  bool tracking = false, paused = false;
  const int deadline_ms = limits.deadline_ms;
  try {
    MigrationChannel ch =
        MigrationChannel::connect_to(path, std::min(deadline_ms, kConnectTimeoutMs));
    ch.set_send_deadline(deadline_ms);
    ch.set_stop_check(limits.stop_check);
    ch.send(MigrationMessage::kHello, to_json_text(vm.manifest()));
    ch.expect(MigrationMessage::kAccept, deadline_ms);

    vm.set_dirty_tracking(true);  // before round 0: nothing written during it is missed
    tracking = true;
    vm.take_dirty_pages();
    std::vector<uint64_t> pages = nonzero_pages(vm.guest_ram());
    for (uint32_t round = 0;; ++round) {
      send_pages(ch, vm.guest_ram(), pages);
      out.stats.pages_per_round.push_back(pages.size());
      spdlog::info("migration: round {} sent {} pages", round, pages.size());
      pages = vm.take_dirty_pages();
      if (pages.size() <= limits.converged_pages || round + 1 >= limits.max_rounds) break;
    }

    const auto pause_start = Clock::now();
    if (!vm.pause()) throw MigrationError("the guest's run ended during the migration");
    paused = true;
    // The VM is unavailable from here: the whole phase has one deadline.
    ch.cap_deadlines_at(pause_start + std::chrono::milliseconds(deadline_ms));
    const double pause_ms = ms_since(pause_start);
    std::vector<uint64_t> rest = vm.take_dirty_pages();
    rest.insert(rest.end(), pages.begin(), pages.end());
    std::sort(rest.begin(), rest.end());
    rest.erase(std::unique(rest.begin(), rest.end()), rest.end());
    send_pages(ch, vm.guest_ram(), rest);
    out.stats.final_pages = rest.size();
    const double pages_ms = ms_since(pause_start);
    const std::vector<std::byte> state = vm.capture_state().serialize();
    out.stats.state_bytes = state.size();
    ch.send(MigrationMessage::kState, state);
    const double state_ms = ms_since(pause_start);
    ch.expect(MigrationMessage::kReady, deadline_ms);
    ch.send(MigrationMessage::kCommit, nullptr, 0);
    // Let go only once the destination says it runs: a destination that died or stalled after
    // kReady must not take the VM with it.
    ch.expect(MigrationMessage::kRunning, deadline_ms);
    out.stats.downtime_ms = ms_since(pause_start);
    // Where the downtime went, cumulative: what to look at when it grows.
    spdlog::info(
        "migration: downtime {:.1f} ms: vCPUs paused after {:.1f}, {} last pages sent "
        "after {:.1f}, state ({} bytes) sent after {:.1f}, destination ready, committed and "
        "running after {:.1f}",
        out.stats.downtime_ms, pause_ms, rest.size(), pages_ms, state.size(), state_ms,
        out.stats.downtime_ms);
    out.stats.total_ms = ms_since(start);
    out.handed_over = true;
    return out;  // the VM stays paused: it lives on at the destination
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  // Not handed over: the VM goes on here as if nothing had happened.
  try {
    if (tracking) vm.set_dirty_tracking(false);
  } catch (const std::exception& e) {
    spdlog::warn("migration: cannot stop dirty logging: {}", e.what());
  }
  if (paused) vm.resume();
  out.stats.total_ms = ms_since(start);
  return out;
}

}  // namespace vmm
