#include "vmm/machine/machine_sections.h"

#include <string>
#include <utility>
#include <vector>

#include "vmm/snapshot/state_components.h"
#include "vmm/vmm_error.h"

namespace vmm {
namespace {

std::string vcpu_section(uint32_t index, const char* part) {
  return "vcpu" + std::to_string(index) + "." + part;
}

}  // namespace

void save_machine_sections(StateSections& s, const MachineParts& m) {
  s.add_component("vm.kvm", VmArchState::kStateVersion, archived(m.kvm));
  s.add_component("devices.serial", SerialPort::kStateVersion, archived(m.serial));
  s.add_component("devices.cmos", CmosPort::kStateVersion, archived(m.cmos));
  std::string line = m.console.line();
  s.add_component("devices.console", kConsoleLineStateVersion, archived(line));
  s.add_component("report.lwp", LwpReport::kStateVersion, archived(m.report));
  s.add_component("report.linux_tasks", kLinuxTasksStateVersion,
                  archived(m.linux_tasks, LwpReport::kMaxTasks));
}

void load_machine_sections(const StateSections& s, const MachineParts& m) {
  read_component(s, "vm.kvm", VmArchState::kStateVersion, m.kvm);
  if (m.has_pit != m.kvm.pit.has_value())
    throw UsageError("the snapshot's device state does not match its guest kind");
  read_component(s, "devices.serial", SerialPort::kStateVersion, m.serial);
  read_component(s, "devices.cmos", CmosPort::kStateVersion, m.cmos);
  std::string line;
  read_component(s, "devices.console", kConsoleLineStateVersion, line);
  m.console.restore_line(std::move(line)).throw_if_error();
  read_component(s, "report.lwp", LwpReport::kStateVersion, m.report);
  read_component(s, "report.linux_tasks", kLinuxTasksStateVersion, m.linux_tasks,
                 LwpReport::kMaxTasks);
  if (m.linux_tasks.size() > LwpReport::kMaxTasks)
    throw UsageError(
        "the snapshot's report.linux_tasks state: " + std::to_string(m.linux_tasks.size()) +
        " Linux address spaces (at most " + std::to_string(LwpReport::kMaxTasks) + ")");
}

// The LWP unit and the NetBurst PMU save their own versioned formats (pmu/lwp/save_area.h,
// pmu/netburst/save_state.h); everything else is a component.
void save_vcpu_sections(StateSections& s, const VcpuParts& v) {
  s.add_component(vcpu_section(v.index, "kvm"), VcpuArchState::kStateVersion, archived(v.kvm));
  s.add(vcpu_section(v.index, "lwp"), v.pmu.save_state());
  if (auto netburst = v.pmu.save_netburst_state())
    s.add(vcpu_section(v.index, "netburst"), *netburst);
  s.add_component(vcpu_section(v.index, "counts"), VcpuCounts::kStateVersion, archived(v.counts));
  s.add_component(vcpu_section(v.index, "interrupt_limit"),
                  pmu::RateLimitedInterruptSink::kStateVersion, archived(v.interrupt_limit));
  v.backend.save_state(s, vcpu_section(v.index, ""));
}

void load_vcpu_sections(const StateSections& s, const VcpuParts& v, const GuestCpu& cpu) {
  read_component(s, vcpu_section(v.index, "kvm"), VcpuArchState::kStateVersion, v.kvm);
  const std::string lwp_name = vcpu_section(v.index, "lwp");
  const std::vector<std::byte>* lwp = s.find(lwp_name);
  if (!lwp) throw UsageError("the snapshot has no " + lwp_name + " state");
  v.pmu.restore_state(*lwp).prefixed("the snapshot's " + lwp_name + " state: ").throw_if_error();
  const std::string netburst_name = vcpu_section(v.index, "netburst");
  v.pmu.restore_netburst_state(s.find(netburst_name))
      .prefixed("the snapshot's " + netburst_name + " state: ")
      .throw_if_error();
  read_component(s, vcpu_section(v.index, "counts"), VcpuCounts::kStateVersion, v.counts);
  const std::string limit_name = vcpu_section(v.index, "interrupt_limit");
  read_component(s, limit_name, pmu::RateLimitedInterruptSink::kStateVersion, v.interrupt_limit);
  // Held interrupts come from the PMU models the guest's CPU has: threshold vectors from LWP with
  // its interrupt, NMIs and PMIs from NetBurst.
  if (!v.interrupt_limit.held_vectors().empty() && !(cpu.lwp.available && cpu.lwp.interrupt))
    throw UsageError("the snapshot's " + limit_name +
                     " state holds a threshold interrupt, but CPU profile " + cpu.profile.name +
                     " has no LWP interrupt");
  if (v.interrupt_limit.holds_nmi_or_pmi() && !cpu.netburst)
    throw UsageError("the snapshot's " + limit_name + " state holds a PMI, but CPU profile " +
                     cpu.profile.name + " has no NetBurst PMU");
  // The counting backend the snapshot's manifest named is the one this machine was built with
  // (restore checks it), so its sections are there; a crafted state without them is refused here.
  v.backend.load_state(s, vcpu_section(v.index, ""));
}

}  // namespace vmm
