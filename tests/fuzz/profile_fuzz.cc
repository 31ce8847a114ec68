// libFuzzer target for CPU profiles (vmm/profiles/README.md) as a snapshot or migration stream
// carries them: parse_embedded_profile must refuse the text with a reason or return a profile, and
// never open a file (baseline_of may name shipped profiles only). Depth and size limits, JSON
// types, CPUID and PMU parameters are all in reach of the mutator.
// Seeds (corpus_profile/): the shipped profiles and profiles with baseline_of.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "vmm/cpu/cpu_profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)vmm::parse_embedded_profile(text, "fuzz.json");
  return 0;
}
