// libFuzzer target for the VMM's own sections of a state container (state.bin, a migration's
// state message; DESIGN §4.12: anyone can recompute the CRCs), read as a restore reads them
// (vmm/machine/state_components.h: read_component, with each component's element budget): the
// LWP report (report.lwp) and the Linux task map (report.linux_tasks), vCPU 0's counts and its
// KVM state's MSR list (vcpu0.counts, vcpu0.kvm) and the console line (devices.console; its
// 4 KiB limit is GuestConsole::restore_line's, a check after the read). The
// PMU models' and steppers' sections have targets of their own (lwp_msr_fuzz, netburst_state_fuzz,
// model_state_fuzz, stepper_state_fuzz).
// Checked: no crash, no sanitizer report, no allocation past libFuzzer's limits (run_fuzzer.sh);
// every section that loads is written back within the same budget (pmuvm never writes what it
// would refuse to read) to the same bytes, and a report that loads renders and takes records.
// Input: the container. Seeds (corpus_vmm_state/, make_seeds.py): a small state with each.
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <vector>
#include <map>
#include <span>
#include <string>

#include "pmu/lwp/event_record.h"
#include "pmu/state_archive.h"
#include "vmm/kvm/kvm_state.h"
#include "vmm/machine/state_components.h"
#include "vmm/report/lwp_report.h"
#include "vmm/snapshot/state_sections.h"
#include "vmm/vcpu_counts.h"
#include "vmm/vmm_error.h"

namespace {

// Section `name` into `value` as a restore reads it; when it loads, it must be written back
// within the same budget to the bytes it came from.
template <typename T>
bool load(const vmm::StateSections& s, const std::string& name, uint16_t version, T& value,
          uint64_t budget = pmu::element_budget_of<T>()) {
  try {
    vmm::read_component(s, name, version, value, budget);
  } catch (const vmm::UsageError&) {
    return false;
  }
  const std::vector<std::byte> again = vmm::archived(value, budget);  // throws: a finding
  const auto original = s.component(name, version);
  if (!original.ok() || again.size() != original.value().size() ||
      !std::equal(again.begin(), again.end(), original.value().begin()))
    std::abort();
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = vmm::StateSections::parse({reinterpret_cast<const std::byte*>(data), size});
  if (!parsed.ok()) return 0;
  const vmm::StateSections& s = parsed.value();

  vmm::LwpReport report;
  if (load(s, "report.lwp", vmm::LwpReport::kStateVersion, report)) {
    (void)report.render(3, 8);
    for (uint64_t i = 0; i < 4; ++i)  // a loaded report goes on taking records within its budget
      report.add_record(static_cast<uint32_t>(i), pmu::lwp::encode_instructions_retired(0, i),
                        false);
    if (report.placed_addresses() > vmm::LwpReport::kMaxPlacedAddresses) std::abort();
  }
  std::map<uint64_t, uint32_t> tasks;
  (void)load(s, "report.linux_tasks", vmm::kLinuxTasksStateVersion, tasks,
             vmm::LwpReport::kMaxTasks);
  vmm::VcpuCounts counts;
  (void)load(s, "vcpu0.counts", vmm::VcpuCounts::kStateVersion, counts);
  vmm::VcpuArchState arch;
  (void)load(s, "vcpu0.kvm", vmm::VcpuArchState::kStateVersion, arch);
  std::string line;
  (void)load(s, "devices.console", vmm::kConsoleLineStateVersion, line);
  return 0;
}
