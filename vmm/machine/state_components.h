// A snapshot's component sections (vmm/snapshot/state_sections.h) to and from the objects that
// archive themselves (pmu/state_archive.h).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "pmu/state_archive.h"
#include "vmm/snapshot/state_sections.h"
#include "vmm/vmm_error.h"

namespace vmm {

template <typename T>
std::vector<std::byte> archived(T& value) {
  pmu::StateWriter w;
  w(value);
  return w.take();
}

// Component `name` at `version` into `value`, all of it; UsageError naming the section when it
// is missing, of another version, or does not fit.
template <typename T>
void read_component(const StateSections& s, const std::string& name, uint16_t version, T& value) {
  auto archive = s.component(name, version);
  if (auto* error = archive.error_message()) throw UsageError(*error);
  try {
    pmu::StateReader r(archive.value());
    r(value);
    r.expect_end();
  } catch (const pmu::StateFormatError& e) {
    throw UsageError("the snapshot's " + name + " state: " + e.what());
  }
}

}  // namespace vmm
