// libFuzzer target for the steppers' state as a snapshot or migration stream carries it (sections
// vcpuN.kvm_stepper and vcpuN.guest_stepper, DESIGN §4.12): byte 0 picks the step controller
// (bit 0 clear) or the guest-assisted stepper (set) and bit 1 the cache geometry (amd-lwp or
// intel-netburst), the rest is its archive, loaded over 4 MiB of guest RAM. Checked: no crash or
// sanitizer report; a state that loads saves and loads again to the same bytes.
// Seeds (corpus_stepper_state/): the step controller archive of tests/snapshot/golden/lwp_kvm, and
// a fresh guest-assisted stepper with intel-netburst's geometry (StateWriter output; the golden
// netburst_guest one holds 540 KB of cache model).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "pmu/state_archive.h"
#include "vmm/cpu/cache_model_geometry.h"
#include "vmm/cpu/cpu_profile.h"
#include "vmm/memory/guest_ram.h"
#include "vmm/precise/guest_assisted_stepper.h"
#include "vmm/precise/step_controller.h"

namespace {

template <typename Stepper>
void load_save_load(Stepper& first, Stepper& second, std::span<const std::byte> bytes) {
  try {
    pmu::StateReader r(bytes);
    r(first);
    r.expect_end();
  } catch (const pmu::StateFormatError&) {
    return;  // refused: what crafted bytes should mostly get
  }
  pmu::StateWriter w;
  w(first);
  const std::vector<std::byte> saved = w.take();
  pmu::StateReader again(saved);
  again(second);  // throws, and so fails, when a state that loaded does not load again
  again.expect_end();
  pmu::StateWriter w2;
  w2(second);
  if (w2.take() != saved) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static vmm::GuestRam ram(4 << 20);
  static const pmu::cache::Geometry geometries[2] = {
      vmm::cache_model_geometry(vmm::builtin_profile("amd-lwp").profile->cache),
      vmm::cache_model_geometry(vmm::builtin_profile("intel-netburst").profile->cache)};
  const pmu::cache::Geometry& geometry = geometries[(data[0] >> 1) & 1];
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  if ((data[0] & 1) == 0) {
    vmm::StepController first(ram, geometry), second(ram, geometry);
    load_save_load(first, second, bytes);
  } else {
    vmm::GuestAssistedStepper first(ram, geometry), second(ram, geometry);
    load_save_load(first, second, bytes);
  }
  return 0;
}
