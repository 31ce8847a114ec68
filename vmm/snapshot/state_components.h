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

// `value`'s archive, within the element budget its reader will have (pmu::element_budget_of, or
// `budget`): StateFormatError rather than a state pmuvm would refuse to read back.
template <typename T>
std::vector<std::byte> archived(T& value, uint64_t budget = pmu::element_budget_of<T>()) {
  pmu::StateWriter w;
  w.set_element_budget(budget);
  w(value);
  return w.take();
}

// Component `name` at `version` into `value`, all of it; UsageError naming the section when it
// is missing, of another version, or does not fit (its element budget included).
template <typename T>
void read_component(const StateSections& s, const std::string& name, uint16_t version, T& value,
                    uint64_t budget = pmu::element_budget_of<T>()) {
  auto archive = s.component(name, version);
  if (auto* error = archive.error_message()) throw UsageError(*error);
  try {
    pmu::StateReader r(archive.value());
    r.set_element_budget(budget);
    r(value);
    r.expect_end();
  } catch (const pmu::StateFormatError& e) {
    throw UsageError("the snapshot's " + name + " state: " + e.what());
  }
}

}  // namespace vmm
