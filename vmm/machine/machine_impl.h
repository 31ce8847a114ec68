// Machine::Impl, the machine behind Machine's interface. Internal to //vmm:machine (not in
// machine.h): what the whole VM shares, with each member function declared next to the ones of
// its file:
//   machine.cc        building the VM and its vCPU runners, running them, the report
//   machine_state.cc  pausing, snapshots and migration; the API's view of the machine
// Each vCPU is a VcpuRunner (vmm/machine/vcpu_runner.h), which sees the machine as a VcpuHost.
#pragma once

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "vmm/cpu/cpuid_table.h"
#include "vmm/devices/guest_console.h"
#include "vmm/devices/io_bus.h"
#include "vmm/devices/port_devices.h"
#include "vmm/kvm/kvm_system.h"
#include "vmm/kvm/kvm_vm.h"
#include "vmm/machine/machine.h"
#include "vmm/machine/guest_kind.h"
#include "vmm/machine/machine_sections.h"
#include "vmm/machine/vcpu_host.h"
#include "vmm/machine/vcpu_runner.h"
#include "vmm/machine/vm_lifecycle.h"
#include "vmm/machine/machine_control.h"
#include "vmm/progress_line.h"
#include "vmm/progress_pauses.h"
#include "vmm/report/lwp_report.h"
#include "vmm/report/perf_data.h"
#include "vmm/vmm_error.h"

namespace vmm {

struct SteadyClock : pmu::Clock {
  uint64_t now_ns() override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

// Members named like a VcpuHost method (options(), clock(), ...) carry a trailing underscore.
struct Machine::Impl : MachineControl, VcpuHost {
  MachineOptions options_;
  GuestCpu guest_cpu_{options_.profile, options_.counting.pv_features()};  // its table: KVM's
  GuestRam ram;
  std::unique_ptr<KvmSystem> kvm;
  std::unique_ptr<KvmVm> vm;
  SteadyClock clock_;
  std::unique_ptr<GuestKind> guest_kind_;  // bundled kernel or Linux (load_guest_kind)
  ProgressPauses progress_;                // run --pause-on-output / --pause-at-instructions
  // The devices, on the port I/O bus (each locks its own state).
  GuestConsole console{progress_,
                       [this](std::string_view line) { return guest_kind_->panic_reason(line); }};
  SerialPort serial{console};
  // A terminal's progress line (ticker thread).
  ProgressLine progress_line{stderr, options_.progress == "always", options_.progress == "never"};
  CmosPort cmos;
  ResetPort i8042;
  ExitPort exit_port;
  BlockConsolePort block_console{ram, console};
  IoBus io_bus_;

  std::vector<std::unique_ptr<VcpuRunner>> vcpus;

  // Running, paused, ended or handed over, and the vCPUs parked for pauses and holds.
  VmLifecycle lifecycle_{options_.vcpus,
                         [this] {
                           for (auto& v : vcpus) v->kick();
                         },
                         options_.start_paused};

  std::mutex report_lock;
  LwpReport report;
  std::map<uint64_t, uint32_t> linux_tasks;  // CR3 -> report task number (Linux guests)

  std::ofstream trace;
  std::unique_ptr<PerfDataFile> perf_data;  // --perf-data, under report_lock

  bool resumed_ = false;                       // built by Machine::resume (for the start-up line)
  std::optional<Machine::Handover> handover_;  // an incoming migration's, until it ran

  // ---- Building and running the VM (machine.cc) -----------------------------------------------

  explicit Impl(MachineOptions o);

  // VcpuHost: what the vCPU runners ask of the machine.
  const MachineOptions& options() const override { return options_; }
  const GuestCpu& guest_cpu() const override { return guest_cpu_; }
  pmu::Clock& clock() override { return clock_; }
  const IoBus& io_bus() const override { return io_bus_; }
  const GuestKind& guest_kind() const override { return *guest_kind_; }
  ProgressPauses& progress() override { return progress_; }
  void finish(int status) override { lifecycle_.end(status); }
  void fail(const std::string& reason) override;
  bool stopping() const override { return lifecycle_.ended(); }
  bool pause_requested() const override { return lifecycle_.must_park(); }
  void park(uint32_t index) override { lifecycle_.park(index); }
  // A progress point was reached (ProgressPauses): every vCPU parks at its next boundary, as for
  // vm.pause, and stays there until vm.resume. Called on a vCPU thread, which parks too.
  void pause_at_progress(const std::string& reason) override;
  // Every exec or fork makes an address space: past the report's limit they share one entry
  // (the guest must not grow this map without bound).
  uint32_t task_of_address_space(uint64_t cr3) override;
  void exit_taken(uint32_t index) override;

  // Wakes each vCPU when interrupts its rate limiter held may go out (storm protection must
  // delay interrupts, never lose or strand them).
  void release_ticker();
  // The progress line (a terminal only): the totals of every vCPU and the report, at `now`.
  void show_progress(uint64_t now);

  // --debug-pause-every: vCPU 0 counts its exits and wakes `debug_pauser`, which pauses and
  // resumes the whole VM from outside, as the API does.
  std::mutex debug_pause_lock;
  std::condition_variable debug_pause_due;
  uint64_t debug_pauses_owed = 0;
  uint64_t debug_exits = 0;  // vCPU 0's thread only
  uint64_t debug_pauses = 0;
  void debug_pauser();

  // Building (Machine::boot and Machine::resume): KVM with the VM and its devices, then the
  // guest's CPUID table (presented by this KVM, or the one a resumed guest saw), then the vCPUs.
  void open_kvm();
  void create_vcpus();
  // run() in its parts: before the vCPUs run, while they run, after they ended.
  int run();
  void prepare_run();
  static void install_signal_handlers();
  void run_vcpus();
  // Why a wait outside the run loop (a migration's) should end now: a stop signal, or the end of
  // the run (vm.shutdown); nothing otherwise.
  std::optional<std::string> stop_requested() const;
  int end_run();
  void write_report();

  // ---- Pausing, snapshots and migration (MigratableVm; machine_state.cc) ----------------------

  // MigratableVm's pause is a hold (VmLifecycle::hold): nested in a user's pause.
  bool pause() override;
  void resume() override { lifecycle_.release(); }
  VmLifecycle& lifecycle() override { return lifecycle_; }
  GuestRam& guest_ram() override { return ram; }
  SnapshotManifest manifest() override;
  StateSections capture_state() override;

  // Loads a snapshot's state into the freshly created VM, vCPUs and models (Machine::resume).
  // Throws UsageError naming the section that is missing or does not fit.
  void apply_state(const StateSections& s);
  // The program the bundled kernel runs as `task`, or null (any other task, a Linux guest's).
  const GuestProgram* program_of_task(uint32_t task) const;
  // --perf-data: the file, with each task's name and ELF (its own program, else --symbols').
  void open_perf_data();
  // The machine's own state sections (vmm/machine/machine_sections.h), `vm_state` standing in
  // for KVM's.
  MachineParts machine_parts(VmArchState& vm_state);

  nlohmann::json describe() override;
  nlohmann::json pmu_state() override;
  Status shut_down() override;
  void handed_over() override;
  void set_dirty_tracking(bool on) override;
  std::vector<uint64_t> take_dirty_pages() override;
};

}  // namespace vmm
