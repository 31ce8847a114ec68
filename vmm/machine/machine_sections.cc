#include "vmm/machine/machine_sections.h"

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "vmm/snapshot/state_components.h"
#include "vmm/vmm_error.h"

namespace vmm {
namespace {

// One section of a machine's state: its name, and how it is saved and loaded. Each section is
// named once, in the tables below, for both directions.
struct Section {
  std::string name;
  std::function<void(StateSections&)> save;
  std::function<void(const StateSections&)> load;
};

// A component: `object` archives itself at `version` within `budget` elements. `check`: what must
// hold of it once loaded (UsageError otherwise).
template <typename T>
Section component(std::string name, uint16_t version, T& object,
                  uint64_t budget = pmu::element_budget_of<T>(),
                  std::function<void()> check = nullptr) {
  return Section{name,
                 [name, version, &object, budget](StateSections& s) {
                   s.add_component(name, version, archived(object, budget));
                 },
                 [name, version, &object, budget, check](const StateSections& s) {
                   read_component(s, name, version, object, budget);
                   if (check) check();
                 }};
}

std::vector<Section> machine_sections(const MachineParts& m) {
  return {
      component("vm.kvm", VmArchState::kStateVersion, m.kvm, pmu::element_budget_of<VmArchState>(),
                [&m] {
                  if (m.has_pit != m.kvm.pit.has_value())
                    throw UsageError("the snapshot's device state does not match its guest kind");
                }),
      component("devices.serial", SerialPort::kStateVersion, m.serial),
      component("devices.cmos", CmosPort::kStateVersion, m.cmos),
      Section{"devices.console",
              [&m](StateSections& s) {
                std::string line = m.console.line();
                s.add_component("devices.console", kConsoleLineStateVersion, archived(line));
              },
              [&m](const StateSections& s) {
                std::string line;
                read_component(s, "devices.console", kConsoleLineStateVersion, line);
                m.console.restore_line(std::move(line)).throw_if_error();
              }},
      component("report.lwp", LwpReport::kStateVersion, m.report),
      component("report.linux_tasks", kLinuxTasksStateVersion, m.linux_tasks, LwpReport::kMaxTasks,
                [&m] {
                  if (m.linux_tasks.size() > LwpReport::kMaxTasks)
                    throw UsageError("the snapshot's report.linux_tasks state: " +
                                     std::to_string(m.linux_tasks.size()) +
                                     " Linux address spaces (at most " +
                                     std::to_string(LwpReport::kMaxTasks) + ")");
                }),
  };
}

// The LWP unit and the NetBurst PMU save their own versioned formats (pmu/lwp/save_area.h,
// pmu/netburst/save_state.h), the counting backend its own sections; everything else (the
// architectural PMU too) is a component.
std::vector<Section> vcpu_sections(const VcpuParts& v) {
  const std::string prefix = "vcpu" + std::to_string(v.index) + ".";
  const std::string lwp = prefix + "lwp";
  const std::string netburst = prefix + "netburst";
  const std::string arch_pmu = prefix + "arch_pmu";
  const std::string limit = prefix + "interrupt_limit";
  return {
      component(prefix + "kvm", VcpuArchState::kStateVersion, v.kvm),
      Section{lwp, [&v, lwp](StateSections& s) { s.add(lwp, v.pmu.save_state()); },
              [&v, lwp](const StateSections& s) {
                const std::vector<std::byte>* bytes = s.find(lwp);
                if (!bytes) throw UsageError("the snapshot has no " + lwp + " state");
                v.pmu.restore_state(*bytes)
                    .prefixed("the snapshot's " + lwp + " state: ")
                    .throw_if_error();
              }},
      // Only with a NetBurst PMU; a state that has one for a CPU without is refused.
      Section{netburst,
              [&v, netburst](StateSections& s) {
                if (auto bytes = v.pmu.save_netburst_state()) s.add(netburst, *bytes);
              },
              [&v, netburst](const StateSections& s) {
                v.pmu.restore_netburst_state(s.find(netburst))
                    .prefixed("the snapshot's " + netburst + " state: ")
                    .throw_if_error();
              }},
      // Only with an architectural PMU, likewise.
      Section{arch_pmu,
              [&v, arch_pmu](StateSections& s) {
                if (std::optional<pmu::arch_perfmon::ArchPmuState> state = v.pmu.arch_pmu_state())
                  s.add_component(arch_pmu, pmu::arch_perfmon::kStateVersion, archived(*state));
              },
              [&v, arch_pmu](const StateSections& s) {
                std::optional<pmu::arch_perfmon::ArchPmuState> state;
                if (s.find(arch_pmu) != nullptr)
                  read_component(s, arch_pmu, pmu::arch_perfmon::kStateVersion, state.emplace());
                v.pmu.restore_arch_pmu_state(state ? &*state : nullptr)
                    .prefixed("the snapshot's " + arch_pmu + " state: ")
                    .throw_if_error();
              }},
      component(prefix + "counts", VcpuCounts::kStateVersion, v.counts),
      // Held interrupts come from the PMU models the guest's CPU has: threshold vectors from LWP
      // with its interrupt, NMIs and PMIs from NetBurst.
      component(prefix + "interrupt_limit", pmu::RateLimitedInterruptSink::kStateVersion,
                v.interrupt_limit, pmu::element_budget_of<pmu::RateLimitedInterruptSink>(),
                [&v, limit] {
                  if (!v.interrupt_limit.held_vectors().empty() &&
                      !(v.cpu.lwp.available && v.cpu.lwp.interrupt))
                    throw UsageError("the snapshot's " + limit +
                                     " state holds a threshold interrupt, but CPU profile " +
                                     v.cpu.profile.name + " has no LWP interrupt");
                  if (v.interrupt_limit.holds_nmi_or_pmi() && !v.cpu.netburst && !v.cpu.arch_pmu)
                    throw UsageError("the snapshot's " + limit +
                                     " state holds a PMI, but CPU profile " + v.cpu.profile.name +
                                     " has no NetBurst or architectural PMU of pmuvm's");
                }),
      // The counting backend the snapshot's manifest named is the one this machine was built
      // with (restore checks it), so its sections are there; a crafted state without them is
      // refused.
      Section{prefix + "(counting backend)",
              [&v, prefix](StateSections& s) { v.backend.save_state(s, prefix); },
              [&v, prefix](const StateSections& s) { v.backend.load_state(s, prefix); }},
  };
}

void save_all(StateSections& s, const std::vector<Section>& sections) {
  for (const Section& section : sections) section.save(s);
}
void load_all(const StateSections& s, const std::vector<Section>& sections) {
  for (const Section& section : sections) section.load(s);
}

}  // namespace

void save_machine_sections(StateSections& s, const MachineParts& m) {
  save_all(s, machine_sections(m));
}
void load_machine_sections(const StateSections& s, const MachineParts& m) {
  load_all(s, machine_sections(m));
}
void save_vcpu_sections(StateSections& s, const VcpuParts& v) { save_all(s, vcpu_sections(v)); }
void load_vcpu_sections(const StateSections& s, const VcpuParts& v) {
  load_all(s, vcpu_sections(v));
}

}  // namespace vmm
