// Where the wall time of a pmuvm run goes (bench/kvm_bench prints the breakdown):
// CLOCK_MONOTONIC at the run's milestones, printed by `--stats` as one line that a caller reads
// beside its own spawn and reap times (the same clock across processes).
#pragma once

#include <time.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>

namespace vmm::timeline {

enum class Mark {
  kMain,          // main() entered: what came before is the loader and static constructors
  kOptionsReady,  // command line, CPU profile, kernel and programs read and checked
  kGuestLoaded,   // guest RAM mapped and the guest's images copied into it
  kKvmReady,      // KVM VM, vCPUs, their registers and devices set up: the vCPU threads start
  kGuestEnded,    // every vCPU thread has ended (the guest's exit, a failure or a signal)
  kTornDown,      // report written, machine destroyed: what follows is exit()
  kCount,
};

inline constexpr std::array<const char*, static_cast<size_t>(Mark::kCount)> kMarkNames = {
    "main", "options", "guest-loaded", "kvm-ready", "guest-ended", "torn-down"};

inline std::array<std::atomic<int64_t>, static_cast<size_t>(Mark::kCount)> g_marks{};

// Records now for `m`; the first record of each mark stands.
inline void mark(Mark m) {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  int64_t expected = 0;
  g_marks[static_cast<size_t>(m)].compare_exchange_strong(
      expected, int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec);
}

// "pmuvm: timeline (CLOCK_MONOTONIC s): main 1234.567890123, options ..., torn-down ..."; marks
// never reached are left out.
inline std::string line() {
  std::string text = "pmuvm: timeline (CLOCK_MONOTONIC s):";
  const char* separator = " ";
  for (size_t i = 0; i < g_marks.size(); ++i) {
    const int64_t ns = g_marks[i].load();
    if (ns == 0) continue;
    char item[64];
    std::snprintf(item, sizeof item, "%s%s %lld.%09lld", separator, kMarkNames[i],
                  static_cast<long long>(ns / 1'000'000'000),
                  static_cast<long long>(ns % 1'000'000'000));
    text += item;
    separator = ", ";
  }
  return text;
}

}  // namespace vmm::timeline
