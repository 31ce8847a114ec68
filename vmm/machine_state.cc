// The machine as the API and migration see it (MachineControl, MigratableVm): every vCPU parked
// between instructions (pause/resume), the state of the VM, vCPUs, models, devices and report as
// snapshot sections (capture_state/apply_state), dirty-page tracking for pre-copy, and the
// descriptions vm.info and vm.pmu return.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string>

#include "vmm/machine/state_components.h"
#include "vmm/machine_impl.h"
#include "vmm/vmm_error.h"

namespace vmm {
bool Machine::Impl::pause() {
  if (!lifecycle_.hold()) return false;
  // Everything the guest printed so far is in the output files now: what a snapshot or a
  // migration resumes continues exactly after it (the tests compare both halves).
  console.flush();
  std::lock_guard<std::mutex> r(report_lock);
  if (trace.is_open()) trace.flush();
  return true;
}

void Machine::Impl::pause_at_progress(const std::string& reason) {
  lifecycle_.pause_at_progress();
  // Said whatever the log level: the answer to an option the user gave.
  std::fprintf(stderr, "pmuvm: paused: %s; vm.resume continues\n", reason.c_str());
}

SnapshotManifest Machine::Impl::manifest() {
  SnapshotManifest m;
  m.vcpus = options_.vcpus;
  m.mem_mib = options_.mem_mib;
  m.seed = options_.seed;
  m.timer_hz = options_.timer_hz;
  m.stepper = stepper_name(options_.stepper);
  m.linux_guest = guest_kind_->linux_guest();
  m.kernel = options_.kernel_name;
  m.max_interrupt_rate = options_.max_interrupts_per_second;
  m.profile = options_.profile;
  m.cpuid = guest_cpuid;
  return m;
}

// One section per component, each with its own version (StateSections::add_component); each
// vCPU runner saves its own ("vcpuN.*").
StateSections Machine::Impl::capture_state() {
  StateSections s;
  VmArchState vm_state = vm->save_state(guest_kind_->has_pit());
  s.add_component("vm.kvm", VmArchState::kStateVersion, archived(vm_state));
  const std::vector<uint32_t> msrs = kvm->msrs_to_save();
  // Each vCPU's KVM state is read by its own thread (kvm_vcpu.h), parked.
  std::vector<StateSections> per_vcpu(vcpus.size());
  lifecycle_.on_each_vcpu([&](uint32_t i) { vcpus[i]->save_state(per_vcpu[i], msrs); });
  for (const StateSections& part : per_vcpu)
    for (const auto& [name, bytes] : part.all()) s.add(name, bytes);
  // The vCPUs are parked: nothing prints or touches a device meanwhile (each locks itself).
  s.add_component("devices.serial", SerialPort::kStateVersion, archived(serial));
  s.add_component("devices.cmos", CmosPort::kStateVersion, archived(cmos));
  std::string line = console.line();
  s.add_component("devices.console", kConsoleLineStateVersion, archived(line));
  {
    std::lock_guard<std::mutex> g(report_lock);
    s.add_component("report.lwp", LwpReport::kStateVersion, archived(report));
    s.add_component("report.linux_tasks", kLinuxTasksStateVersion,
                    archived(linux_tasks, LwpReport::kMaxTasks));
  }
  return s;
}

void Machine::Impl::apply_state(const StateSections& s) {
  VmArchState vm_state;
  read_component(s, "vm.kvm", VmArchState::kStateVersion, vm_state);
  const std::vector<uint32_t> msrs = kvm->msrs_to_save();  // what a restore may set
  if (guest_kind_->has_pit() != vm_state.pit.has_value())
    throw UsageError("the snapshot's device state does not match its guest kind");
  for (auto& v : vcpus) v->restore_state(s, msrs);
  vm->restore_state(vm_state);
  read_component(s, "devices.serial", SerialPort::kStateVersion, serial);
  read_component(s, "devices.cmos", CmosPort::kStateVersion, cmos);
  std::string line;
  read_component(s, "devices.console", kConsoleLineStateVersion, line);
  console.restore_line(std::move(line)).throw_if_error();
  read_component(s, "report.lwp", LwpReport::kStateVersion, report);
  read_component(s, "report.linux_tasks", kLinuxTasksStateVersion, linux_tasks,
                 LwpReport::kMaxTasks);
  if (linux_tasks.size() > LwpReport::kMaxTasks)
    throw UsageError(
        "the snapshot's report.linux_tasks state: " + std::to_string(linux_tasks.size()) +
        " Linux address spaces (at most " + std::to_string(LwpReport::kMaxTasks) + ")");
}

nlohmann::json Machine::Impl::describe() {
  const VmLifecycle::State state = lifecycle_.state();
  return {{"state", state == VmLifecycle::State::kHandedOver ? "ended" : VmLifecycle::name(state)},
          {"config",
           {{"vcpus", options_.vcpus},
            {"mem_mib", options_.mem_mib},
            {"cpu", options_.profile.name},
            {"guest", guest_kind_->name()},
            {"kernel", options_.kernel_name},
            {"seed", options_.seed},
            {"stepper", stepper_name(options_.stepper)}}}};
}

nlohmann::json Machine::Impl::pmu_state() {
  nlohmann::json out = nlohmann::json::array();
  for (auto& v : vcpus) out.push_back(v->pmu_state());
  return {{"vcpus", out}};
}

Status Machine::Impl::shut_down() {
  if (Status s = lifecycle_.shut_down(); !s.ok()) return s;
  spdlog::info("vm.shutdown: the run ends (status 0)");
  return {};
}

// A run that ended meanwhile (a signal during the migration) stays ended.
void Machine::Impl::handed_over() { (void)lifecycle_.hand_over(); }

void Machine::Impl::set_dirty_tracking(bool on) {
  ram.set_write_tracking(on);
  vm->set_dirty_logging(on);
}

std::vector<uint64_t> Machine::Impl::take_dirty_pages() {
  std::vector<uint64_t> pages = vm->take_dirty_pages();
  std::vector<uint64_t> vmm = ram.take_written_pages();
  pages.insert(pages.end(), vmm.begin(), vmm.end());
  std::sort(pages.begin(), pages.end());
  pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
  return pages;
}

}  // namespace vmm
