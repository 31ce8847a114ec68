// A machine's size and pace: what the command line asks for (`run`), what a Machine is built
// with (MachineOptions) and what a snapshot's manifest or a migration's hello carries. One struct
// that each of them is, so it is copied whole from one to the other and named once.
#pragma once

#include <cstdint>

namespace vmm {

struct MachineShape {
  uint32_t vcpus = 1;
  uint64_t mem_mib = 256;
  uint64_t seed = 1;        // LWPCB.Random's generator: the same seed, the same records
  uint32_t timer_hz = 100;  // the bundled kernel's tick; 0 = none (not used by Linux)
  // Interrupts per vCPU per second before the VMM holds them back (storm protection,
  // pmu/rate_limited_interrupt_sink.h).
  uint32_t max_interrupt_rate = 10000;
};

}  // namespace vmm
