// The machine as the API and migration see it (MachineControl, MigratableVm): every vCPU parked
// between instructions (pause/resume), the state of the VM, vCPUs, models, devices and report as
// snapshot sections (capture_state/apply_state), dirty-page tracking for pre-copy, and the
// descriptions vm.info and vm.pmu return.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string>

#include "pmu/state_archive.h"
#include "vmm/machine_impl.h"
#include "vmm/vmm_error.h"

namespace vmm {
void Machine::Impl::park() {
  std::unique_lock<std::mutex> lock(pause_lock);
  ++parked;
  pause_changed.notify_all();
  pause_changed.wait(lock, [&] { return !pause_requested || stop; });
  --parked;
}

bool Machine::Impl::pause() {
  std::unique_lock<std::mutex> lock(pause_lock);
  if (pause_depth++ == 0) {
    pause_requested = true;
    for (auto& v : vcpus) kick(*v);
  }
  // Also when nested: a pause the VM took itself at a progress point (pause_at_progress) may
  // still have vCPUs on their way to park().
  pause_changed.wait(lock, [&] { return parked == vcpus.size() || stop; });
  if (stop) return false;
  // Everything the guest printed so far is in the output files now: what a snapshot or a
  // migration resumes continues exactly after it (the tests compare both halves).
  console.flush();
  std::lock_guard<std::mutex> r(report_lock);
  if (trace.is_open()) trace.flush();
  return true;
}

void Machine::Impl::pause_at_progress(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(pause_lock);
    ++pause_depth;
    pause_requested = true;
    progress_paused = true;
  }
  for (auto& v : vcpus) kick(*v);  // this vCPU parks at the top of its loop
  // Said whatever the log level: the answer to an option the user gave.
  std::fprintf(stderr, "pmuvm: paused: %s; vm.resume continues\n", reason.c_str());
}

bool Machine::Impl::take_progress_pause() {
  std::lock_guard<std::mutex> lock(pause_lock);
  return std::exchange(progress_paused, false);
}

void Machine::Impl::resume() {
  std::lock_guard<std::mutex> lock(pause_lock);
  if (pause_depth == 0 || --pause_depth > 0) return;
  pause_requested = false;
  pause_changed.notify_all();
}

SnapshotManifest Machine::Impl::manifest() {
  SnapshotManifest m;
  m.vcpus = options.vcpus;
  m.mem_mib = options.mem_mib;
  m.seed = options.seed;
  m.timer_hz = options.timer_hz;
  m.stepper = stepper_name(options.stepper);
  m.linux_guest = guest_kind->linux_guest();
  m.kernel = options.kernel_name;
  m.max_interrupt_rate = options.max_interrupts_per_second;
  m.profile = options.profile;
  m.cpuid = guest_cpuid;
  return m;
}

template <typename T>
std::vector<std::byte> Machine::Impl::archived(T& value) {
  pmu::StateWriter w;
  w(value);
  return w.take();
}

// One section per component, each with its own version (StateSections::add_component); the LWP
// unit and the NetBurst PMU save their own versioned formats (pmu/lwp/save_area.h,
// pmu/netburst/save_state.h).
StateSections Machine::Impl::capture_state() {
  StateSections s;
  VmArchState vm_state = vm->save_state(guest_kind->has_pit());
  s.add_component("vm.kvm", VmArchState::kStateVersion, archived(vm_state));
  const std::vector<uint32_t> msrs = kvm->msrs_to_save();
  for (auto& vp : vcpus) {
    Vcpu& v = *vp;
    const std::string p = "vcpu" + std::to_string(v.kvm->index()) + ".";
    VcpuArchState arch = v.kvm->save_state(msrs);
    s.add_component(p + "kvm", VcpuArchState::kStateVersion, archived(arch));
    s.add(p + "lwp", v.control->save_state());
    if (auto netburst = v.control->save_netburst_state()) s.add(p + "netburst", *netburst);
    VcpuCounts counts = v.counts();
    s.add_component(p + "counts", VcpuCounts::kStateVersion, archived(counts));
    s.add_component(p + "interrupt_limit", pmu::RateLimitedInterruptSink::kStateVersion,
                    archived(*v.limited));
    if (v.kvm_stepper)
      s.add_component(p + "kvm_stepper", StepController::kStateVersion, archived(*v.kvm_stepper));
    if (v.guest_stepper)
      s.add_component(p + "guest_stepper", GuestAssistedStepper::kStateVersion,
                      archived(*v.guest_stepper));
  }
  // The vCPUs are parked: nothing prints or touches a device meanwhile (each locks itself).
  s.add_component("devices.serial", SerialPort::kStateVersion, archived(serial));
  s.add_component("devices.cmos", CmosPort::kStateVersion, archived(cmos));
  std::string line = console.line();
  s.add_component("devices.console", kConsoleLineStateVersion, archived(line));
  {
    std::lock_guard<std::mutex> g(report_lock);
    s.add_component("report.lwp", LwpReport::kStateVersion, archived(report));
    s.add_component("report.linux_tasks", kLinuxTasksStateVersion, archived(linux_tasks));
  }
  return s;
}

void Machine::Impl::apply_state(const StateSections& s) {
  auto section = [&](const std::string& name) -> const std::vector<std::byte>& {
    const std::vector<std::byte>* bytes = s.find(name);
    if (!bytes) throw UsageError("the snapshot has no " + name + " state");
    return *bytes;
  };
  // Component `name` at `version` into `value`, all of it.
  auto read = [&](const std::string& name, uint16_t version, auto& value) {
    auto archive = s.component(name, version);
    if (auto* error = std::get_if<std::string>(&archive)) throw UsageError(*error);
    try {
      pmu::StateReader r(std::get<std::span<const std::byte>>(archive));
      r(value);
      r.expect_end();
    } catch (const pmu::StateFormatError& e) {
      throw UsageError("the snapshot's " + name + " state: " + e.what());
    }
  };
  VmArchState vm_state;
  read("vm.kvm", VmArchState::kStateVersion, vm_state);
  const std::vector<uint32_t> msrs = kvm->msrs_to_save();  // what a restore may set
  if (guest_kind->has_pit() != vm_state.pit.has_value())
    throw UsageError("the snapshot's device state does not match its guest kind");
  for (auto& vp : vcpus) {
    Vcpu& v = *vp;
    const std::string p = "vcpu" + std::to_string(v.kvm->index()) + ".";
    VcpuArchState arch;
    read(p + "kvm", VcpuArchState::kStateVersion, arch);
    v.kvm->restore_state(arch, msrs);
    v.kvm->load_exit_state();
    if (auto error = v.control->restore_state(section(p + "lwp")))
      throw UsageError("the snapshot's " + p + "lwp state: " + *error);
    if (auto error = v.control->restore_netburst_state(s.find(p + "netburst")))
      throw UsageError("the snapshot's " + p + "netburst state: " + *error);
    if (v.kvm_stepper && v.guest_stepper) throw std::logic_error("two steppers");
    VcpuCounts counts;
    read(p + "counts", VcpuCounts::kStateVersion, counts);
    v.set_counts(counts);
    read(p + "interrupt_limit", pmu::RateLimitedInterruptSink::kStateVersion, *v.limited);
    // Held interrupts come from the PMU models the profile has: threshold vectors from LWP with
    // its interrupt, NMIs and PMIs from NetBurst.
    if (!v.limited->held_vectors().empty() &&
        !(options.profile.lwp.available && options.profile.lwp.interrupt))
      throw UsageError("the snapshot's " + p +
                       "interrupt_limit state holds a threshold "
                       "interrupt, but CPU profile " +
                       options.profile.name + " has no LWP interrupt");
    if (v.limited->holds_nmi_or_pmi() && !options.profile.netburst)
      throw UsageError("the snapshot's " + p +
                       "interrupt_limit state holds a PMI, but CPU "
                       "profile " +
                       options.profile.name + " has no NetBurst PMU");
    // The stepper the snapshot's manifest named is the one this machine was built with
    // (restore checks it), so its section is there; a crafted one without it is refused here.
    if (v.kvm_stepper) read(p + "kvm_stepper", StepController::kStateVersion, *v.kvm_stepper);
    if (v.guest_stepper)
      read(p + "guest_stepper", GuestAssistedStepper::kStateVersion, *v.guest_stepper);
    v.debug_unknown = true;
  }
  vm->restore_state(vm_state);
  read("devices.serial", SerialPort::kStateVersion, serial);
  read("devices.cmos", CmosPort::kStateVersion, cmos);
  std::string line;
  read("devices.console", kConsoleLineStateVersion, line);
  console.restore_line(std::move(line)).throw_if_error();
  read("report.lwp", LwpReport::kStateVersion, report);
  read("report.linux_tasks", kLinuxTasksStateVersion, linux_tasks);
  if (linux_tasks.size() > LwpReport::kMaxTasks)
    throw UsageError("the snapshot's report.linux_tasks state: " +
                     std::to_string(linux_tasks.size()) + " Linux address spaces (at most " +
                     std::to_string(LwpReport::kMaxTasks) + ")");
}

nlohmann::json Machine::Impl::describe() {
  return {{"state", stop ? "ended" : "running"},
          {"config", {{"vcpus", options.vcpus},
                      {"mem_mib", options.mem_mib},
                      {"cpu", options.profile.name},
                      {"guest", guest_kind->name()},
                      {"kernel", options.kernel_name},
                      {"seed", options.seed},
                      {"stepper", stepper_name(options.stepper)}}}};
}

nlohmann::json Machine::Impl::pmu_state() {
  nlohmann::json out = nlohmann::json::array();
  for (auto& vp : vcpus) {
    Vcpu& v = *vp;
    pmu::lwp::LwpUnit& lwp = v.control->lwp();
    const pmu::lwp::UnitStats& st = lwp.stats();
    nlohmann::json j = {
        {"vcpu", v.kvm->index()},
        {"counted_instructions", v.counted},
        {"lwp",
         {{"lwpmsr0", lwp.lwpmsr0()},
          {"lwpcb", lwp.lwpcb_address()},
          {"records_stored", st.records_stored},
          {"records_missed", st.records_missed},
          {"interrupts", st.interrupts},
          {"page_faults", st.page_faults}}}};
    if (pmu::netburst::NetburstPmu* nb = v.control->netburst()) {
      const pmu::netburst::PmuState s = nb->state();
      j["netburst"] = {{"counters", std::vector<uint64_t>(s.counters.begin(),
                                                          s.counters.begin() + s.counter_count)},
                       {"cccrs", std::vector<uint32_t>(s.cccrs.begin(),
                                                       s.cccrs.begin() + s.counter_count)},
                       {"escrs", s.escrs}};
    }
    out.push_back(j);
  }
  return {{"vcpus", out}};
}

void Machine::Impl::shut_down() {
  spdlog::info("vm.shutdown: the run ends (status 0)");
  finish(0);
}

void Machine::Impl::handed_over() {
  migrated_away = true;
  finish(0);
}

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
