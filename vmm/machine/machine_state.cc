// The machine as the API and migration see it (MachineControl, MigratableVm): every vCPU parked
// between instructions (pause/resume), the state of the VM, vCPUs, models, devices and report as
// snapshot sections (capture_state/apply_state), dirty-page tracking for pre-copy, and the
// descriptions vm.info and vm.pmu return.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string>

#include "vmm/machine/machine_sections.h"
#include "vmm/machine/machine_impl.h"
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
  static_cast<MachineShape&>(m) = options_;
  m.stepper = stepper_name(options_.counting.stepper);
  m.linux_guest = guest_kind_->linux_guest();
  m.kernel = options_.kernel_name;
  m.profile = options_.profile;
  m.cpuid = guest_cpu_.cpuid;
  return m;
}

// The sections and what each holds: vmm/machine/machine_sections.h. Each vCPU runner saves its
// own ("vcpuN.*").
StateSections Machine::Impl::capture_state() {
  StateSections s;
  VmArchState vm_state = vm->save_state(guest_kind_->has_pit());
  const std::vector<uint32_t> msrs = kvm->msrs_to_save();
  // Each vCPU's KVM state is read by its own thread (kvm_vcpu.h), parked.
  std::vector<StateSections> per_vcpu(vcpus.size());
  lifecycle_.on_each_vcpu([&](uint32_t i) { vcpus[i]->save_state(per_vcpu[i], msrs); });
  // The vCPUs are parked: nothing prints or touches a device meanwhile (each locks itself).
  {
    std::lock_guard<std::mutex> g(report_lock);
    save_machine_sections(s, machine_parts(vm_state));
  }
  for (const StateSections& part : per_vcpu)
    for (const auto& [name, bytes] : part.all()) s.add(name, bytes);
  return s;
}

// Every section is loaded before KVM sees any of it: a state that does not fit leaves the VM
// untouched (and the restore fails).
void Machine::Impl::apply_state(const StateSections& s) {
  VmArchState vm_state;
  load_machine_sections(s, machine_parts(vm_state));
  std::vector<VcpuArchState> arch;
  for (auto& v : vcpus) arch.push_back(v->load_state(s));
  const std::vector<uint32_t> msrs = kvm->msrs_to_save();  // what a restore may set
  for (size_t i = 0; i < vcpus.size(); ++i) vcpus[i]->apply_kvm_state(arch[i], msrs);
  vm->restore_state(vm_state);
}

MachineParts Machine::Impl::machine_parts(VmArchState& vm_state) {
  return MachineParts{vm_state, serial, cmos, console, report, linux_tasks, guest_kind_->has_pit()};
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
            {"stepper", stepper_name(options_.counting.stepper)}}}};
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
