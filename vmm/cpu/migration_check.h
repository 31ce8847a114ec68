// May a guest that booted with one CPU profile run on a VMM whose profile is another?
// DESIGN §4.10: the guest keeps the CPUID it booted with, so the destination must be able to
// present exactly that: the same vendor, family and model, every feature bit the guest saw, and
// for LWP every EDX feature and at least the event count, latency bits and filters the guest saw.
// A refusal names every missing thing, so an operator sees at once what a destination lacks.
//
// What is compared, in this order (each refusal is one short line; within a section, in the
// order of its keys, as profile_schema.h declares them with what a destination must offer):
//   vendor, family, model          must be equal     "vendor AuthenticAMD != GenuineIntel",
//                                                    "family 0x15 != 0xf", "model 0x1 != 0x10"
//   features                       each one present  "CPUID feature sse4_2 missing"
//   address_sizes (CPUID 0x80000008: the guest's page tables and MTRRs were built for them;
//                  KVM cannot offer more physical bits than the host has)
//                                  present, each width at least the guest's
//                                                    "address_sizes missing",
//                                                    "address_sizes.physical 36 < 48"
//   LWP (CPUID 0x8000001C)         present           "LWP missing"
//                                  same version      "LWP version 1 != 2"
//                                  the interrupt (EDX 1), each event (EDX 2-4), data address
//                                  and both filters (ECX): present
//                                                    "LWP feature BRE missing"
//                                  max_events, cache_max_bits at least the guest's
//                                                    "LWP max_events 1 < 3"
//                                  branch_prediction equal
//                                                    "LWP branch_prediction true != false"
//   NetBurst PMU                   present           "NetBurst PMU missing"
//                                  counters, counter_bits at least the guest's
//                                                    "NetBurst counters 8 < 18"
//                                  threads_per_core equal (it changes what the ESCR/CCCR T1
//                                  bits do, so neither more nor fewer is compatible)
//                                                    "NetBurst threads_per_core 1 != 2"
//   architectural PMU (CPUID 0xA)  present, each number at least the guest's
//                                                    "architectural PMU counters 2 < 4"
// In "A != B" A is what the guest saw and B the destination's; in "A < B" A is the destination's
// and B what the guest saw (the destination offers less).
//
// Not compared, because the guest keeps its own (they travel with it and need nothing of the
// destination's hardware or profile): stepping, brand, max leaves, cpuid_overrides (the profile
// author's raw words), misc_enable, the LWP enable policy and vector, the cache geometry, names.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "vmm/cpu/cpu_profile.h"

namespace vmm {

// Empty when `destination` can run a guest that saw `guest_saw`; otherwise one reason per
// missing thing, in the order above.
std::vector<std::string> migration_refusals(const CpuProfile& guest_saw,
                                            const CpuProfile& destination);

// "migration from FROM to TO: accepted\n", or "...: refused\n" followed by one line per reason,
// indented by two spaces. `from` and `to` name the profiles as the user gave them.
std::string describe_verdict(std::string_view from, std::string_view to,
                             const std::vector<std::string>& refusals);

}  // namespace vmm
