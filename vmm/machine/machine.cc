// Machine: one guest from boot to exit status. Builds the KVM VM, its devices and its vCPU runners
// (vmm/machine/vcpu_runner.h: CPUID, boot registers, each vCPU's PMU models and stepper), runs one
// thread per vCPU, ends the run (guest exit, failure, signal) and writes the report. Pausing and
// snapshots are in machine_state.cc; machine_impl.h holds the state they share.
#include "vmm/machine/machine.h"

#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>

#include "guest/abi/pmuvm_abi.h"
#include "pmu/arch_perfmon/msr_map.h"
#include "vmm/api/api_server.h"
#include "vmm/migration/migration_channel.h"
#include "vmm/boot/long_mode.h"
#include "vmm/counting/kvm_stepping_backend.h"
#include "vmm/cpu/cache_model_geometry.h"
#include "vmm/cpu/cpuid_table.h"
#include "vmm/cpu/netburst_config.h"
#include "vmm/kvm/kvm_self_check.h"
#include "vmm/boot/elf_image.h"
#include "vmm/machine/machine_api.h"
#include "vmm/machine/machine_impl.h"
#include "vmm/printable.h"
#include "vmm/report/code_places.h"
#include "vmm/report/lwp_trace.h"
#include "vmm/startup_timeline.h"
#include "vmm/vmm_error.h"

namespace vmm {
namespace {

// SIGINT/SIGTERM: the run stops between instructions with status 128 + N and says where each
// vCPU was (a hung guest can be looked at, not just killed). Set by the handler, polled by the
// release ticker.
std::atomic<int> g_stop_signal{0};

std::vector<CpuidEntry> supported_cpuid(const KvmSystem& kvm) {
  std::vector<CpuidEntry> host;
  for (const kvm_cpuid_entry2& e : kvm.supported_cpuid())
    host.push_back(CpuidEntry{e.function, e.index, e.flags, e.eax, e.ebx, e.ecx, e.edx});
  return host;
}

// What a snapshot's guest saw that this host's KVM cannot present (cpuid_bits_missing): the
// profile's table filtered by this KVM is the most it can present, one line per register lacking
// bits. Asked at a migration's hello (host_cpuid_refusals) and again when the VM is built.
std::vector<std::string> cpuid_refusals(const KvmSystem& kvm, const SnapshotManifest& m,
                                        uint32_t pv_features) {
  return cpuid_bits_missing(
      m.cpuid, filter_guest_cpuid(supported_cpuid(kvm), m.profile, pv_features).entries);
}

}  // namespace

Machine::Impl::Impl(MachineOptions o)
    : options_(std::move(o)),
      // The emulator maps guest frames a second time, at their linear addresses.
      ram(options_.mem_mib << 20, options_.counting.stepper == StepperKind::kEmulate
                                      ? GuestRam::Backing::kShareable
                                      : GuestRam::Backing::kPrivate),
      progress_(options_.pause_on_output, options_.pause_at_instructions) {
  for (const Status& claimed :
       {io_bus_.insert(Serial16550::kCom1Base, Serial16550::kPortCount, serial),
        io_bus_.insert(CmosRtc::kIndexPort, 2, cmos),
        io_bus_.insert(I8042Reset::kDataPort, 1, i8042),
        io_bus_.insert(I8042Reset::kCommandPort, 1, i8042),
        io_bus_.insert(PMUVM_PORT_EXIT, 1, exit_port),
        io_bus_.insert(PMUVM_PORT_CONSOLE, 1, block_console)})
    claimed.throw_if_error();
  console.set_before_output([this] { progress_line.erase(); });
}

void Machine::Impl::fail(const std::string& reason) { lifecycle_.fail(reason, PMUVM_EXIT_PANIC); }

void Machine::Impl::exit_taken(uint32_t index) {
  if (!options_.debug_pause_every || index != 0 || ++debug_exits % options_.debug_pause_every != 0)
    return;
  std::lock_guard<std::mutex> g(debug_pause_lock);
  ++debug_pauses_owed;
  debug_pause_due.notify_all();
}

uint32_t Machine::Impl::task_of_address_space(uint64_t cr3) {
  std::lock_guard<std::mutex> g(report_lock);
  if (linux_tasks.size() >= LwpReport::kMaxTasks && !linux_tasks.count(cr3))
    return LwpReport::kOtherTasks;
  auto [it, added] = linux_tasks.emplace(cr3, static_cast<uint32_t>(linux_tasks.size() + 1));
  if (added) {
    char name[48];
    std::snprintf(name, sizeof name, "CR3 %#llx", static_cast<unsigned long long>(cr3));
    report.set_task_name(it->second, name);
  }
  return it->second;
}

void Machine::Impl::debug_pauser() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(debug_pause_lock);
      debug_pause_due.wait(lock, [&] { return debug_pauses_owed > 0 || lifecycle_.ended(); });
      if (lifecycle_.ended()) return;
      --debug_pauses_owed;
    }
    if (!pause()) return;  // the run ended: nothing is held
    ++debug_pauses;
    resume();
  }
}

void Machine::Impl::show_progress(uint64_t now) {
  ProgressLine::Figures f;
  for (auto& v : vcpus) {
    f.counted += v->counted_now();
    f.exits += v->exits_now();
  }
  {
    std::lock_guard<std::mutex> g(report_lock);
    f.records = report.records();
  }
  progress_line.update(now, f);
}

void Machine::Impl::release_ticker() {
  std::vector<uint64_t> watched_since(vcpus.size(), 0);  // holding_since_ns at the last wake-up
  while (!lifecycle_.ended()) {
    if (const int sig = g_stop_signal.load()) {
      lifecycle_.interrupt(sig);
      continue;
    }
    const uint64_t now = clock_.now_ns();
    uint64_t next = now + 50'000'000;  // look again at least every 50 ms
    if (progress_line.enabled()) show_progress(now);
    for (size_t i = 0; i < vcpus.size(); ++i) {
      VcpuRunner* v = vcpus[i].get();
      // A vCPU that holds the guest's interrupts (the KVM stepper between two user
      // instructions) looks at its window every kInterruptWindowNs at its own exits, and each
      // look moves holding_since_ns. It is kicked only when a whole kHoldingWatchNs passed
      // without a look (one instruction running long, a REP string at a breakpoint, a fault
      // that took it into a halting kernel): at an earlier deadline its own next exit, tens of
      // microseconds away while it steps, would only race the kick (13 442 needless kicks in a
      // 21 s lwp_demo run). The watch has a fixed period, not one per look: waking at every
      // look (~4 ms) cost two context switches each (7 254 switches in a stepped lwp_demo run
      // in the nested host, 3 891 with the fixed period; perf stat -e context-switches).
      const uint64_t since = v->holding_since_ns();
      if (since != 0) {
        if (since == watched_since[i] && now - since >= kHoldingWatchNs) v->kick();
        next = std::min(next, now + kHoldingWatchNs);
      }
      watched_since[i] = since;
      const uint64_t at = v->release_at_ns().load();
      if (at == 0) continue;
      if (at <= now) {
        v->release_at_ns() = 0;
        v->kick();
      } else {
        next = std::min(next, at);
      }
    }
    lifecycle_.wait_for_end(next - now);
  }
}

void Machine::Impl::create_vcpus() {
  // The guest's own PMU is the one its CPUID shows (DESIGN §4.11): pmuvm's model where the
  // profile asks for it (§4.13), else KVM's vPMU where the profile has one and KVM offers it;
  // otherwise the vPMU is switched off (also under pmuvm's model: no KVM counter reaches the
  // guest).
  const std::optional<std::string> pmu = describe_guest_pmu(guest_cpu_.cpuid);
  if (pmu && guest_cpu_.arch_pmu)
    spdlog::info("guest PMU: {}, pmuvm's model{}", *pmu,
                 vm->disable_vpmu() ? "; KVM's vPMU switched off" : "");
  else if (pmu)
    spdlog::info("guest PMU: {}, from KVM's vPMU", *pmu);
  else
    spdlog::info("guest PMU: none in the guest's CPUID{}",
                 vm->disable_vpmu() ? "; KVM's vPMU switched off" : " (KVM offers no vPMU here)");
  for (uint32_t i = 0; i < options_.vcpus; ++i) {
    auto v = std::make_unique<VcpuRunner>(*this, *vm, ram, i);
    VcpuRunner* raw = v.get();
    // Only LWP raises fixed vectors (NetBurst goes through LVTPC): each is a threshold
    // interrupt of the task running on this vCPU.
    v->on_threshold_interrupt([this, raw](bool coalesced) {
      std::lock_guard<std::mutex> g(report_lock);
      report.add_interrupt(raw->task(), coalesced);
    });
    v->pmu().lwp().set_record_observer([this, raw](const pmu::lwp::StoredRecord& rec) {
      std::lock_guard<std::mutex> g(report_lock);
      report.add_record(raw->task(), rec.bytes, rec.missed);
      if (trace.is_open()) trace << trace_line(raw->task(), raw->index(), rec) << '\n';
      if (perf_data)
        perf_data->add_record(
            raw->task(), raw->index(), rec.bytes,
            raw->pmu().lwp().event_interval(std::to_integer<uint8_t>(rec.bytes[0])));
    });
    auto pmi_sample = [this, raw](int counter, uint64_t rip, uint8_t cpl) {
      std::lock_guard<std::mutex> g(report_lock);
      if (perf_data) perf_data->add_pmi(raw->task(), raw->index(), counter, rip, cpl);
    };
    if (pmu::netburst::NetburstPmu* nb = v->pmu().netburst()) nb->set_pmi_observer(pmi_sample);
    if (pmu::arch_perfmon::ArchPmu* ap = v->pmu().arch_pmu()) ap->set_pmi_observer(pmi_sample);
    vcpus.push_back(std::move(v));
  }
  // The PMU MSRs pmuvm implements: LWP, MISC_ENABLE, the NetBurst range, the PV MSRs, and the
  // architectural PMU's where pmuvm models it (else KVM's vPMU, or KVM's #GP, answers them).
  std::vector<MsrRange> trapped = {
      {0xC0000105, 2}, {kMsrMiscEnable, 1}, {0x300, 0x100}, {PMUVM_MSR_FIRST, PMUVM_MSR_COUNT}};
  if (guest_cpu_.arch_pmu) {
    namespace ap = pmu::arch_perfmon;
    trapped.insert(trapped.end(),
                   {{ap::kMsrPmc0, ap::kMaxCounters},
                    {ap::kMsrPerfEvtSel0, ap::kMaxCounters},
                    {ap::kMsrFixedCtr0, ap::kMaxFixedCounters},
                    {ap::kMsrPerfCapabilities, 1},
                    {ap::kMsrFixedCtrCtrl, ap::kMsrGlobalInuse - ap::kMsrFixedCtrCtrl + 1},
                    {ap::kMsrFullWidthPmc0, ap::kMaxCounters},
                    {kMsrDebugctl, 1}});
    if (guest_cpu_.arch_pmu->pebs) trapped.push_back({ap::kMsrDsArea, 1});  // PEBS_ENABLE: 0x3xx
    if (guest_cpu_.arch_pmu->lbr)
      trapped.insert(trapped.end(), {{ap::kMsrLbrSelect, 2},
                                     {ap::kMsrLbrFrom0, ap::kLbrEntries},
                                     {ap::kMsrLbrTo0, ap::kLbrEntries},
                                     {ap::kMsrLbrInfo0, ap::kLbrEntries}});
  }
  vm->set_msr_filter(trapped);
}

void Machine::Impl::open_kvm() {
  kvm = std::make_unique<KvmSystem>(options_.kvm_device);
  check_kvm_serves(options_.kvm_device, options_.counting.kvm_stepping(),
                   guest_kind_->linux_guest());
  vm = std::make_unique<KvmVm>(*kvm, ram);
  if (guest_kind_->has_pit()) {
    vm->create_pit();  // Linux calibrates its TSC and LAPIC timer against it
    serial.set_irq_callback([this](bool level) { vm->set_irq_line(Serial16550::kCom1Irq, level); });
  }
}

Machine Machine::boot(MachineOptions options) {
  auto m = std::make_unique<Impl>(std::move(options));
  m->guest_kind_ = load_guest_kind(m->options_, m->guest_cpu_, m->ram).value_or_throw();
  timeline::mark(timeline::Mark::kGuestLoaded);
  m->open_kvm();
  m->guest_cpu_.present(supported_cpuid(*m->kvm));
  m->create_vcpus();
  const LongModeState entry = m->guest_kind_->set_up_long_mode(m->ram);
  for (auto& v : m->vcpus) {
    m->guest_kind_->set_boot_registers(v->kvm(), v->index(), entry);
    if (m->guest_cpu_.misc_enable) v->kvm().set_msr(kMsrMiscEnable, *m->guest_cpu_.misc_enable);
  }
  return Machine(std::move(m));
}

Machine Machine::resume(MachineOptions options, const SnapshotManifest& manifest,
                        const Arrival& arrive, std::optional<Handover> handover) {
  auto m = std::make_unique<Impl>(std::move(options));
  m->resumed_ = true;
  m->handover_ = std::move(handover);
  m->guest_kind_ = restored_guest_kind(manifest.linux_guest);
  m->open_kvm();
  // The guest keeps the CPUID it booted with (DESIGN §4.10).
  const std::vector<std::string> missing =
      cpuid_refusals(*m->kvm, manifest, m->guest_cpu_.pv_features);
  if (!missing.empty()) {
    std::string text;
    for (const std::string& line : missing) text += "\n  " + line;
    throw UsageError("this host's KVM cannot present the CPUID the guest saw:" + text);
  }
  m->guest_cpu_.resume_with(manifest.cpuid);
  m->create_vcpus();
  m->apply_state(arrive(m->ram));
  uint64_t counted = 0;  // --pause-at-instructions goes on from the snapshot's count
  for (auto& v : m->vcpus) counted += v->counted();
  m->progress_.set_counted(counted);
  return Machine(std::move(m));
}

// Before any vCPU runs: the trace and perf data files, the task names.
void Machine::Impl::prepare_run() {
  if (!options_.lwp_trace.empty()) {
    trace.open(options_.lwp_trace);
    if (!trace) throw UsageError("cannot write LWP trace " + options_.lwp_trace);
  }
  if (!options_.perf_data.empty()) open_perf_data();
  for (uint32_t task = 1; const GuestProgram* p = program_of_task(task); ++task)
    report.set_task_name(task, p->path.substr(p->path.rfind('/') + 1));
}

const GuestProgram* Machine::Impl::program_of_task(uint32_t task) const {
  // The bundled kernel numbers its tasks 1.. in the order of the programs (guest/kernel/task.c).
  return task >= 1 && task <= options_.programs.size() ? &options_.programs[task - 1] : nullptr;
}

void Machine::Impl::install_signal_handlers() {
  // The kick signal only has to interrupt KVM_RUN, which returns EINTR whatever the flags say.
  // SA_RESTART keeps it from breaking anything else the vCPU thread may be doing, such as a
  // console write() on stdout (EINTR there would set the stream's error flag and lose output).
  struct sigaction sa {};
  sa.sa_handler = [](int) {};
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(kKickSignal, &sa, nullptr);
  // The stop signals only set a flag the ticker looks at every 50 ms (and a migration's waits
  // every 100 ms); SA_RESTART, as for the kick, keeps them from failing a console write or a
  // socket call that happened to be in progress on whichever thread took the signal.
  struct sigaction stop_sa {};
  stop_sa.sa_handler = [](int sig) { g_stop_signal = sig; };
  stop_sa.sa_flags = SA_RESTART;
  sigemptyset(&stop_sa.sa_mask);
  sigaction(SIGINT, &stop_sa, nullptr);
  sigaction(SIGTERM, &stop_sa, nullptr);
}

std::optional<std::string> Machine::Impl::stop_requested() const {
  if (const int sig = g_stop_signal.load())
    return std::string("stopped by signal ") + std::to_string(sig) + " (" + strsignal(sig) + ")";
  if (lifecycle_.ended()) return std::string("the run ended");
  return std::nullopt;
}

// The vCPU threads, the --debug-pause-every pauser and the API socket, until the run ends.
void Machine::Impl::run_vcpus() {
  // A migration's destination creates its threads and binds its API socket before it says ready
  // (each can fail, and after the commit the source has let the VM go): its vCPUs start held,
  // and run only once the source committed.
  const bool incoming = handover_ && handover_->commit;
  if (incoming) lifecycle_.hold_from_start();
  std::vector<std::thread> threads;
  std::thread pauser;
  // The API socket serves while the vCPUs run; stopped (and its socket removed) before the
  // machine goes away, so no call reaches a machine that is gone.
  MachineApi api(*this);
  std::optional<api::ApiServer> server;
  auto join_all = [&] {
    {
      std::lock_guard<std::mutex> g(debug_pause_lock);
      debug_pause_due.notify_all();
    }
    if (pauser.joinable()) pauser.join();
    for (std::thread& t : threads) t.join();
  };
  // Until the commit the API answers as during any migration (vm_api.h): nothing may pause or
  // snapshot a VM that is not yet this side's.
  if (incoming) api.set_migrating(true);
  try {
    for (auto& v : vcpus) threads.emplace_back([&v] { v->run(); });
    if (options_.debug_pause_every) pauser = std::thread([this] { debug_pauser(); });
    if (!options_.api_socket.empty()) {
      server.emplace(options_.api_socket, api);
      if (Status started = server->start(); !started.ok()) {
        const std::string why =
            "--api-socket " + options_.api_socket + ": " + started.error().message;
        if (incoming) throw VmmError(why);  // the source keeps the VM
        fail(why);
        server.reset();
      }
    }
    if (incoming) {
      handover_->commit([this] { return stop_requested(); });
      api.set_migrating(false);
      lifecycle_.release();
    }
  } catch (const std::exception& e) {
    // Nothing ran: the held vCPUs (and the pauser) leave as the run ends, and the VM stays the
    // source's. Only a destination gets here: thread creation failing on a normal start is the
    // same end without a source to tell.
    const std::string why = e.what();
    lifecycle_.end(3);  // the exception below is the outcome, not this status
    join_all();
    if (server) server->stop();
    if (!incoming) throw;
    if (handover_->fail_before_commit) handover_->fail_before_commit(why);
    throw MigrationError(why);
  }
  // The ticker returns once the run ended; only then are the vCPU threads joined, so it never
  // signals a thread that is gone (a vCPU thread ends only after the run ended).
  release_ticker();
  join_all();
  timeline::mark(timeline::Mark::kGuestEnded);
  if (options_.debug_pause_every)  // said whatever the log level: the answer to an option given
    std::fprintf(stderr,
                 "pmuvm: --debug-pause-every %llu: the VM was paused and resumed %llu times\n",
                 static_cast<unsigned long long>(options_.debug_pause_every),
                 static_cast<unsigned long long>(debug_pauses));
  if (server) server->stop();
}

// After the run: what happened, the report, the statistics, and the exit status.
int Machine::Impl::end_run() {
  progress_line.erase();
  if (const int sig = lifecycle_.interrupted_by()) {
    spdlog::warn("stopped by signal {} ({}); exit status {}", sig, strsignal(sig), 128 + sig);
    for (auto& v : vcpus)
      spdlog::warn("vCPU {} was at {}", v->index(), describe_registers(v->kvm()));
  }
  for (auto& v : vcpus) v->log_rate_limit();
  if (lifecycle_.state() == VmLifecycle::State::kHandedOver) {
    spdlog::info("the VM now runs at the migration destination; this process ends with 0");
    return 0;
  }
  if (!options_.lwp_report.empty()) write_report();
  if (perf_data) {
    std::lock_guard<std::mutex> g(report_lock);
    perf_data->finish();
    spdlog::info("perf data: {} samples in {}", perf_data->samples(), options_.perf_data);
  }
  for (auto& v : vcpus) v->log_closing_lines();
  if (options_.stats)
    for (auto& v : vcpus) v->print_stats();
  if (const std::string failure = lifecycle_.failure(); !failure.empty()) throw VmmError(failure);
  return lifecycle_.exit_status();
}

int Machine::Impl::run() {
  prepare_run();
  install_signal_handlers();
  spdlog::info("{} {} with {} vCPU(s), {} MiB, CPU profile {}", resumed_ ? "resuming" : "booting",
               options_.kernel_name, options_.vcpus, options_.mem_mib, options_.profile.name);
  timeline::mark(timeline::Mark::kKvmReady);
  run_vcpus();
  return end_run();
}

void Machine::Impl::open_perf_data() {
  // --symbols' first file names the tasks that are no program of this command line.
  PerfDataFile::Task shared;
  if (!options_.symbols.empty()) {
    const std::string& path = options_.symbols.front();
    Result<ElfImage> elf =
        load_elf_file(path, uint64_t{1} << 30, "1 GiB, the most --symbols reads");
    if (elf.ok()) {
      shared.elf_path = std::filesystem::absolute(path).string();
      shared.segments = std::move(elf.value().segments);
    } else {
      spdlog::warn("--perf-data: {}; other tasks' samples stay without symbols",
                   printable(elf.error().message));
    }
  }
  perf_data = std::make_unique<PerfDataFile>(options_.perf_data, [this, shared](uint32_t task) {
    if (const GuestProgram* p = program_of_task(task))
      return PerfDataFile::Task{report.task_name(task), std::filesystem::absolute(p->path).string(),
                                p->image.segments};
    PerfDataFile::Task t = shared;
    t.name = report.task_name(task);
    return t;
  });
}

void Machine::Impl::write_report() {
  std::map<uint32_t, std::string> own;
  for (uint32_t task = 1; const GuestProgram* p = program_of_task(task); ++task)
    own[task] = p->path;
  TaskCodePlaces places(std::move(own), options_.symbols);
  const std::string text = report.render(10, 30, std::ref(places));
  if (options_.lwp_report == "-") {
    std::fputs(text.c_str(), stdout);
    return;
  }
  std::ofstream out(options_.lwp_report);
  out << text;
  if (!out) spdlog::error("cannot write LWP report {}", options_.lwp_report);
}

Machine::Machine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Machine::Machine(Machine&&) noexcept = default;

std::vector<std::string> host_cpuid_refusals(const SnapshotManifest& m,
                                             const std::string& kvm_device) {
  return cpuid_refusals(KvmSystem(kvm_device), m, options_from_manifest(m).counting.pv_features());
}

MachineOptions options_from_manifest(const SnapshotManifest& m) {
  MachineOptions o;
  o.profile = m.profile;
  static_cast<MachineShape&>(o) = m;
  // parse_manifest checked the name
  o.counting = CountingChoice::resumed(parse_stepper(m.stepper).value_or(StepperKind::kNone));
  if (m.linux_guest) o.linux_guest.emplace();  // the run loop's Linux rules; nothing to load
  o.kernel_name = m.kernel;
  return o;
}
Machine::~Machine() = default;
int Machine::run() { return impl_->run(); }

}  // namespace vmm
