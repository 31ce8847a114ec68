// What a machine may be: the command line's ranges, which a snapshot's manifest or a migration's
// hello must keep to as well (DESIGN §4.12: "limits are the command line's"). A crafted manifest
// asking for more (64 vCPUs, 1 TiB of RAM) is refused before anything is allocated.
#pragma once

#include <cstdint>

namespace vmm::limits {

inline constexpr uint32_t kMaxVcpus = 16;  // the bundled kernel's MAX_CPUS
inline constexpr uint64_t kMinMemMib = 4;
inline constexpr uint64_t kMaxMemMib = 65536;
inline constexpr uint32_t kMaxTimerHz = 10000;

}  // namespace vmm::limits
