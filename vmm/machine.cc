// Machine: one guest from boot to exit status. Builds the KVM VM and its vCPUs (CPUID, boot
// registers, each vCPU's PMU models and stepper), runs one thread per vCPU around KVM_RUN, ends the
// run (guest exit, failure, signal) and writes the report. What each exit does is in
// machine_exits.cc, the KVM stepper in machine_stepping.cc, pausing and snapshots in
// machine_state.cc; machine_impl.h holds the state they share.
#include "vmm/machine.h"

#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>

#include "guest/abi/pmuvm_abi.h"
#include "vmm/api/api_server.h"
#include "vmm/boot/long_mode.h"
#include "vmm/cpu/cache_model_geometry.h"
#include "vmm/cpu/cpuid_table.h"
#include "vmm/machine_api.h"
#include "vmm/machine_impl.h"
#include "vmm/report/lwp_trace.h"
#include "vmm/startup_timeline.h"
#include "vmm/vmm_error.h"

namespace vmm {
namespace {

constexpr int kKickSignal = SIGUSR1;
// SIGINT/SIGTERM: the run stops between instructions with status 128 + N and says where each
// vCPU was (a hung guest can be looked at, not just killed). Set by the handler, polled by the
// release ticker.
std::atomic<int> g_stop_signal{0};

// The paravirtual features the bundled kernel is offered (guest/abi/pmuvm_abi.h). The block
// console is always offered (Linux guests do not look).
uint32_t pv_features_for(MachineOptions::Stepper stepper) {
  switch (stepper) {
    case MachineOptions::Stepper::kGuest:
      return PMUVM_PV_CONSOLE | PMUVM_PV_USER_ENTRY | PMUVM_PV_GUEST_STEPPER;
    // The KVM stepper finds the kernel's returns to user mode itself (DESIGN §4.7).
    case MachineOptions::Stepper::kKvm:
    case MachineOptions::Stepper::kKvmSingle: return PMUVM_PV_CONSOLE;
    case MachineOptions::Stepper::kNone: break;
  }
  return PMUVM_PV_CONSOLE | PMUVM_PV_USER_ENTRY;
}

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
  return cpuid_bits_missing(m.cpuid,
                            filter_guest_cpuid(supported_cpuid(kvm), m.profile, pv_features).entries);
}

std::vector<kvm_cpuid_entry2> to_kvm(const std::vector<CpuidEntry>& table) {
  std::vector<kvm_cpuid_entry2> out;
  for (const CpuidEntry& e : table) {
    kvm_cpuid_entry2 k{};
    k.function = e.function;
    k.index = e.index;
    k.flags = e.flags;
    k.eax = e.eax;
    k.ebx = e.ebx;
    k.ecx = e.ecx;
    k.edx = e.edx;
    out.push_back(k);
  }
  return out;
}


}  // namespace

Machine::Impl::Impl(MachineOptions o)
    : options(std::move(o)),
      ram(options.mem_mib << 20),
      progress(options.pause_on_output, options.pause_at_instructions) {
  // RAM of a restored VM comes from the snapshot or the migration stream.
  guest_kind = options.restore
                   ? restored_guest_kind(options.restore->manifest.linux_guest)
                   : load_guest_kind(options, ram, pv_features()).value_or_throw();
  for (const Status& claimed : {io_bus.insert(Serial16550::kCom1Base, Serial16550::kPortCount, serial),
                                io_bus.insert(CmosRtc::kIndexPort, 2, cmos),
                                io_bus.insert(I8042Reset::kDataPort, 1, i8042),
                                io_bus.insert(I8042Reset::kCommandPort, 1, i8042),
                                io_bus.insert(PMUVM_PORT_EXIT, 1, exit_port),
                                io_bus.insert(PMUVM_PORT_CONSOLE, 1, block_console)})
    claimed.throw_if_error();
}

uint32_t Machine::Impl::pv_features() const { return pv_features_for(options.stepper); }

void Machine::Impl::fail(const std::string& reason) {
  {
    std::lock_guard<std::mutex> g(failure_lock);
    if (failure.empty()) failure = reason;
  }
  finish(PMUVM_EXIT_PANIC);
}

void Machine::Impl::finish(int status) {
  if (stop.exchange(true)) return;
  exit_status = status;
  {
    std::lock_guard<std::mutex> g(pause_lock);
    pause_changed.notify_all();  // parked vCPUs end too
  }
  for (auto& v : vcpus) kick(*v);
  std::lock_guard<std::mutex> g(stop_lock);
  stop_signal.notify_all();
}

void Machine::Impl::kick(Vcpu& v) {
  v.kvm->run_state()->immediate_exit = 1;
  std::lock_guard<std::mutex> g(v.thread_lock);
  if (v.thread) pthread_kill(v.thread, kKickSignal);
}

void Machine::Impl::interrupted_by(int sig) {
  {
    std::lock_guard<std::mutex> g(failure_lock);
    if (failure.empty()) interrupted_signal = sig;
  }
  finish(128 + sig);
}

void Machine::Impl::debug_pauser() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(debug_pause_lock);
      debug_pause_due.wait(lock, [&] { return debug_pauses_owed > 0 || stop; });
      if (stop) return;
      --debug_pauses_owed;
    }
    if (pause()) ++debug_pauses;
    resume();
  }
}

void Machine::Impl::release_ticker() {
  std::vector<uint64_t> watched_since(vcpus.size(), 0);  // holding_since_ns at the last wake-up
  std::unique_lock<std::mutex> lock(stop_lock);
  while (!stop) {
    if (const int sig = g_stop_signal.load()) {
      lock.unlock();
      interrupted_by(sig);
      lock.lock();
      continue;
    }
    const uint64_t now = clock.now_ns();
    uint64_t next = now + 50'000'000;  // look again at least every 50 ms
    for (size_t i = 0; i < vcpus.size(); ++i) {
      Vcpu* v = vcpus[i].get();
      // A vCPU that holds the guest's interrupts (the KVM stepper between two user
      // instructions) looks at its window every kInterruptWindowNs at its own exits, and each
      // look moves holding_since_ns. It is kicked only when a whole kHoldingWatchNs passed
      // without a look (one instruction running long, a REP string at a breakpoint, a fault
      // that took it into a halting kernel): at an earlier deadline its own next exit, tens of
      // microseconds away while it steps, would only race the kick (13 442 needless kicks in a
      // 21 s lwp_demo run). The watch has a fixed period, not one per look: waking at every
      // look (~4 ms) cost two context switches each (7 254 switches in a stepped lwp_demo run
      // in the nested host, 3 891 with the fixed period; perf stat -e context-switches).
      const uint64_t since = v->holding_since_ns.load();
      if (since != 0) {
        if (since == watched_since[i] && now - since >= kHoldingWatchNs) kick(*v);
        next = std::min(next, now + kHoldingWatchNs);
      }
      watched_since[i] = since;
      const uint64_t at = v->release_at_ns.load();
      if (at == 0) continue;
      if (at <= now) {
        v->release_at_ns = 0;
        kick(*v);
      } else {
        next = std::min(next, at);
      }
    }
    stop_signal.wait_for(lock, std::chrono::nanoseconds(next - now));
  }
}

void Machine::Impl::vcpu_loop(Vcpu& v) {
  {
    std::lock_guard<std::mutex> g(v.thread_lock);
    v.thread = pthread_self();
  }
  struct Unregister {  // on every way out: kick() must not signal this thread once it is gone
    Vcpu& v;
    ~Unregister() {
      std::lock_guard<std::mutex> g(v.thread_lock);
      v.thread = 0;
    }
  } unregister{v};
  try {
    while (!stop) {
      const bool pausing = pause_requested.load();
      if (pausing && !v.needs_completion) {
        end_free_run(v);  // a snapshot saves the models with everything counted
        park();
        continue;
      }
      // A vCPU on its way to being parked only completes its last exit (immediate_exit: no
      // guest instruction runs), so its stepping state is left as it is.
      if (!pausing) arm_free_run(v);
      if (v.kvm_stepper && !pausing) update_stepping(v);
      if (pausing) v.kvm->run_state()->immediate_exit = 1;
      const int r = v.kvm->run();
      v.kvm->run_state()->immediate_exit = 0;  // before looking at why: see kick()
      // Any KVM_RUN, even one that returns EINTR at once, completes the previous exit's access.
      const uint32_t reason = v.kvm->run_state()->exit_reason;
      v.needs_completion = r >= 0 && (reason == KVM_EXIT_IO || reason == KVM_EXIT_MMIO ||
                                      reason == KVM_EXIT_X86_RDMSR ||
                                      reason == KVM_EXIT_X86_WRMSR);
      if (r >= 0) {
        v.exits.record(*v.kvm->run_state());
        ++v.exit_count;
        count_exit(v, reason);
        if (options.debug_pause_every && v.kvm->index() == 0 &&
            ++debug_exits % options.debug_pause_every == 0) {
          std::lock_guard<std::mutex> g(debug_pause_lock);
          ++debug_pauses_owed;
          debug_pause_due.notify_all();
        }
      }
      // The host backend: the exit ends a free run before it is handled (it may change what the
      // models count). The double's steps continue it: what they retire goes to the double.
      if (v.free_run) {
        if (v.counter_double && r >= 0 && reason == KVM_EXIT_DEBUG)
          ++v.host_stats.steps_while_free;
        else
          end_free_run(v);
      }
      // A kick (r < 0) stops the vCPU between instructions: nothing retired.
      if (v.kvm_stepper) {
        if (r < 0) kicked(v);
        else if (v.kvm->run_state()->exit_reason != KVM_EXIT_DEBUG) other_exit(v);
      }
      const uint64_t sent = v.interrupts.sent;
      v.limited->poll();  // storm protection: release held interrupts when allowed
      v.interrupts.deliver_pending_pmi();  // a PMI waiting for the guest to unmask LVTPC
      if (r >= 0 && !dispatch(v)) break;  // r < 0: EINTR/EAGAIN, a kick; re-check stop
      if (v.kvm_stepper) interrupt_window(v, v.interrupts.sent != sent, r < 0);
      v.release_at_ns = v.limited->next_release_ns().value_or(0);
    }
    end_free_run(v);  // the run ended (another vCPU's exit): the report counts everything
  } catch (const std::exception& e) {
    fail(e.what());
  }
}

void Machine::Impl::create_vcpus() {
  const LongModeState boot = guest_kind->set_up_long_mode(ram);
  if (!options.restore) {
    guest_cpuid = build_guest_cpuid(supported_cpuid(*kvm), options.profile, pv_features());
  } else {
    // The guest keeps the CPUID it booted with (DESIGN §4.10).
    const std::vector<std::string> missing =
        cpuid_refusals(*kvm, options.restore->manifest, pv_features());
    if (!missing.empty()) {
      std::string text;
      for (const std::string& m : missing) text += "\n  " + m;
      throw UsageError("this host's KVM cannot present the CPUID the guest saw:" + text);
    }
    guest_cpuid = options.restore->manifest.cpuid;
  }
  const std::vector<CpuidEntry>& table = guest_cpuid;
  // The guest's own PMU is the one its CPUID shows (DESIGN §4.11): KVM's vPMU gives it where the
  // profile has one and KVM offers it; otherwise the vPMU is switched off.
  if (const std::optional<std::string> pmu = describe_guest_pmu(table))
    spdlog::info("guest PMU: {}, from KVM's vPMU", *pmu);
  else
    spdlog::info("guest PMU: none in the guest's CPUID{}",
                 vm->disable_vpmu() ? "; KVM's vPMU switched off" : " (KVM offers no vPMU here)");
  for (uint32_t i = 0; i < options.vcpus; ++i) {
    auto v = std::make_unique<Vcpu>();
    v->kvm = std::make_unique<KvmVcpu>(*vm, i);
    v->kvm->set_cpuid(to_kvm(cpuid_for_vcpu(table, i)));  // APIC ID = the vCPU index
    // A restored vCPU's state comes from the snapshot (apply_state).
    if (!options.restore) guest_kind->set_boot_registers(*v->kvm, i, boot);
    if (options.profile.misc_enable && !options.restore)
      v->kvm->set_msr(kMsrMiscEnable, *options.profile.misc_enable);
    v->interrupts.vm = vm.get();
    v->interrupts.vcpu = v->kvm.get();
    v->interrupts.apic_id = i;
    v->limited = std::make_unique<pmu::RateLimitedInterruptSink>(
        v->interrupts, clock, options.max_interrupts_per_second);
    v->tap.limited = v->limited.get();
    std::optional<pmu::netburst::Config> netburst;
    if (options.profile.netburst) {
      netburst.emplace();
      netburst->counters = options.profile.netburst->counters;
      netburst->counter_bits = options.profile.netburst->counter_bits;
      netburst->threads_per_core = options.profile.netburst->threads_per_core;
      netburst->third_level_cache = options.profile.cache.l3.has_value();
      // IQ_ESCR0/1 exist on family 0xF models 1 and 2 only (pmu/netburst/README.md).
      netburst->iq_escrs = options.profile.family == 0xF && options.profile.model <= 2;
      if (auto error = pmu::netburst::validate(*netburst))
        throw UsageError("CPU profile " + options.profile.name + ": NetBurst PMU: " + *error);
    }
    v->control = std::make_unique<VcpuControlBlock>(i, i, options.profile.lwp, options.seed, ram,
                                                    v->tap, netburst, &v->page_faults);
    if (options.stepper == MachineOptions::Stepper::kGuest)
      v->guest_stepper =
          std::make_unique<GuestAssistedStepper>(ram, cache_model_geometry(options.profile.cache));
    if (options.stepper == MachineOptions::Stepper::kKvm ||
        options.stepper == MachineOptions::Stepper::kKvmSingle)
      v->kvm_stepper = std::make_unique<StepController>(
          ram, cache_model_geometry(options.profile.cache),
          StepController::Options{.block_steps = options.stepper == MachineOptions::Stepper::kKvm});
    if (options.host_backend && options.host_backend->counter_double) {
      auto counters = std::make_unique<SkiddingCounterDouble>(options.host_backend->double_skid);
      v->counter_double = counters.get();
      v->host_counters = std::move(counters);
    } else if (options.host_backend) {
      v->host_counters = std::make_unique<PerfHostCounters>(kKickSignal);
    }
    // The cache model sees the accesses of instructions that retire while an enabled event can
    // use them: a VM that profiles only instructions and branches leaves it empty (issue 21).
    auto demand = [control = v->control.get()] {
      return StepAccountant::ModelDemand{control->uses_cache_model(),
                                         control->uses_branch_predictor()};
    };
    if (v->guest_stepper) v->guest_stepper->set_model_demand(demand);
    if (v->kvm_stepper) v->kvm_stepper->set_model_demand(demand);
    Vcpu* raw = v.get();
    // Only LWP raises fixed vectors (NetBurst goes through LVTPC): each is a threshold
    // interrupt of the task running on this vCPU.
    v->tap.on_vector = [this, raw = v.get()](bool coalesced) {
      std::lock_guard<std::mutex> g(report_lock);
      report.add_interrupt(raw->task, coalesced);
    };
    v->control->lwp().set_record_observer([this, raw](const pmu::lwp::StoredRecord& rec) {
      std::lock_guard<std::mutex> g(report_lock);
      report.add_record(raw->task, rec.bytes, rec.missed);
      if (trace.is_open()) trace << trace_line(raw->task, raw->kvm->index(), rec) << '\n';
    });
    vcpus.push_back(std::move(v));
  }
  // The PMU MSRs pmuvm implements: LWP, MISC_ENABLE, the NetBurst range, the PV MSRs.
  vm->set_msr_filter({{0xC0000105, 2}, {kMsrMiscEnable, 1}, {0x300, 0x100}, {PMUVM_MSR_FIRST, PMUVM_MSR_COUNT}});
}

void Machine::Impl::set_up_kvm() {
  if (vm) return;
  kvm = std::make_unique<KvmSystem>(options.kvm_device);
  vm = std::make_unique<KvmVm>(*kvm, ram);
  if (guest_kind->has_pit()) {
    vm->create_pit();  // Linux calibrates its TSC and LAPIC timer against it
    serial.set_irq_callback(
        [this](bool level) { vm->set_irq_line(Serial16550::kCom1Irq, level); });
  }
  create_vcpus();
}

int Machine::Impl::run() {
  if (!options.lwp_trace.empty()) {
    trace.open(options.lwp_trace);
    if (!trace) throw UsageError("cannot write LWP trace " + options.lwp_trace);
  }
  set_up_kvm();
  if (options.restore) {
    apply_state(options.restore->state);
    uint64_t counted = 0;  // --pause-at-instructions goes on from the snapshot's count
    for (auto& v : vcpus) counted += v->counted;
    progress.set_counted(counted);
    if (options.restore->before_start) options.restore->before_start();
    options.restore->state = StateSections();  // not needed any more; may be large
  }
  // The bundled kernel numbers its tasks 1.. in the order of the programs (guest/kernel/task.c).
  for (size_t i = 0; i < options.programs.size(); ++i) {
    const std::string& path = options.programs[i].path;
    report.set_task_name(static_cast<uint32_t>(i + 1), path.substr(path.rfind('/') + 1));
  }

  // The kick signal only has to interrupt KVM_RUN, which returns EINTR whatever the flags say.
  // SA_RESTART keeps it from breaking anything else the vCPU thread may be doing, such as a
  // console write() on stdout (EINTR there would set the stream's error flag and lose output).
  struct sigaction sa{};
  sa.sa_handler = [](int) {};
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(kKickSignal, &sa, nullptr);
  struct sigaction stop_sa{};
  stop_sa.sa_handler = [](int sig) { g_stop_signal = sig; };
  sigemptyset(&stop_sa.sa_mask);
  sigaction(SIGINT, &stop_sa, nullptr);
  sigaction(SIGTERM, &stop_sa, nullptr);
  spdlog::info("{} {} with {} vCPU(s), {} MiB, CPU profile {}",
               options.restore ? "resuming" : "booting", options.kernel_name, options.vcpus,
               options.mem_mib, options.profile.name);
  if (options.start_paused) {  // the user's pause, taken before anything ran (vm.resume ends it)
    pause_requested = true;
    pause_depth = 1;
  }
  timeline::mark(timeline::Mark::kKvmReady);
  std::vector<std::thread> threads;
  for (auto& v : vcpus) threads.emplace_back([this, &v] { vcpu_loop(*v); });
  std::thread pauser;
  if (options.debug_pause_every) pauser = std::thread([this] { debug_pauser(); });
  // The API socket serves while the vCPUs run; stopped (and its socket removed) before the
  // machine goes away, so no call reaches a machine that is gone.
  MachineApi api(*this, options.start_paused);
  std::optional<api::ApiServer> server;
  if (!options.api_socket.empty()) {
    server.emplace(options.api_socket, api);
    if (auto error = server->start()) {
      fail("--api-socket " + options.api_socket + ": " + *error);
      server.reset();
    }
  }
  // The ticker returns once finish() stopped the run; only then are the vCPU threads joined, so
  // it never signals a thread that is gone (a vCPU thread ends only after finish()).
  release_ticker();
  {
    std::lock_guard<std::mutex> g(debug_pause_lock);
    debug_pause_due.notify_all();
  }
  if (pauser.joinable()) pauser.join();
  for (std::thread& t : threads) t.join();
  timeline::mark(timeline::Mark::kGuestEnded);
  if (options.debug_pause_every)  // said whatever the log level: the answer to an option given
    std::fprintf(stderr, "pmuvm: --debug-pause-every %llu: the VM was paused and resumed %llu times\n",
                 static_cast<unsigned long long>(options.debug_pause_every),
                 static_cast<unsigned long long>(debug_pauses));
  if (server) server->stop();
  if (interrupted_signal) {
    spdlog::warn("stopped by signal {} ({}); exit status {}", interrupted_signal,
                 strsignal(interrupted_signal), 128 + interrupted_signal);
    for (auto& v : vcpus)
      spdlog::warn("vCPU {} was at {}", v->kvm->index(), describe_registers(*v->kvm));
  }
  for (auto& v : vcpus)  // storm protection at work: say so, with the counts that add up
    if (const pmu::RateLimitedInterruptSink& l = *v->limited; l.throttled() > 0)
      spdlog::warn("vCPU {}: --max-interrupt-rate {}/s held back {} PMU interrupt requests, "
                   "{} of them coalesced into one already held; {} delivered{}",
                   v->kvm->index(), options.max_interrupts_per_second, l.throttled(),
                   l.coalesced(), l.delivered(),
                   l.has_pending() ? " (the run ended while one was still held)" : "");

  if (migrated_away) {
    spdlog::info("the VM now runs at the migration destination; this process ends with 0");
    return 0;
  }
  if (!options.lwp_report.empty()) write_report();
  for (auto& v : vcpus)
    if (const uint64_t n = v->interrupts.undeliverable_pmis.seen(); n > 0)
      spdlog::warn("vCPU {}: {} PMI(s) dropped: LVTPC's delivery mode is neither fixed nor NMI",
                   v->kvm->index(), n);
  for (auto& v : vcpus)
    if (v->page_faults.delivered || v->page_faults.dropped)
      spdlog::info("vCPU {}: LWP #PF traps: {} delivered, {} dropped (raised by SYSCALL)",
                   v->kvm->index(), v->page_faults.delivered, v->page_faults.dropped);
  for (auto& v : vcpus)  // what stepping cost: steps per counted instruction (bench/, README)
    if (v->kvm_stepper) {
      const StepController::Stats& st = v->kvm_stepper->stats();
      spdlog::info("vCPU {}: KVM stepper: {} user instructions at their successor breakpoint, {} "
                   "single-stepped, {} kernel instructions stepped, {} stops at kernel return "
                   "sites ({} into counted user mode), {} #DBs handed back to the guest, {} CPL-3 "
                   "instructions counted",
                   v->kvm->index(), st.user_steps, st.single_steps, st.kernel_steps,
                   st.return_stops, st.user_returns, st.guest_debug_exceptions, v->counted);
      if (st.missed_returns)
        spdlog::warn("vCPU {}: {} time(s) user mode was found running past every watched kernel "
                     "return site: instructions in between were not counted",
                     v->kvm->index(), st.missed_returns);
    } else if (v->guest_stepper)
      spdlog::info("vCPU {}: guest-assisted stepper: {} CPL-3 and 0 CPL-0 steps, {} CPL-3 "
                   "instructions counted", v->kvm->index(), v->guest_stepper->steps(), v->counted);
  for (auto& v : vcpus)
    if (v->host_counters) {
      const Vcpu::HostStats& h = v->host_stats;
      spdlog::info("vCPU {}: host backend: {} free runs ({} ended by an overflow), {} of {} "
                   "counted instructions unseen, {} overshot",
                   v->kvm->index(), h.free_runs, h.overflow_ends, h.unseen_instructions,
                   v->counted, h.overshoots);
    }
  if (options.stats) print_stats();
  if (!failure.empty()) throw VmmError(failure);
  return exit_status;
}

void Machine::Impl::count_exit(Vcpu& v, uint32_t reason) {
  switch (reason) {
    case KVM_EXIT_DEBUG: ++v.debug_exits; break;
    case KVM_EXIT_IO: case KVM_EXIT_MMIO: ++v.io_exits; break;
    case KVM_EXIT_X86_RDMSR: case KVM_EXIT_X86_WRMSR: ++v.msr_exits; break;
    default: break;
  }
}

void Machine::Impl::print_stats() {
  for (auto& v : vcpus) {
    // Stops that each counted one instruction (a successor breakpoint or a single-step trap),
    // and stops that counted a block of several (DESIGN §4.7, block stepping).
    uint64_t steps = 0;
    uint64_t blocks = 0;
    if (v->kvm_stepper) {
      const StepController::Stats& st = v->kvm_stepper->stats();
      steps = st.user_steps + st.single_steps + st.kernel_steps;
      blocks = st.blocks;
    } else if (v->guest_stepper) {
      steps = v->guest_stepper->steps();
    }
    std::fprintf(stderr,
                 "pmuvm: vcpu%u: exits %llu, single steps %llu, blocks %llu, counted instructions "
                 "%llu\n",
                 v->kvm->index(), static_cast<unsigned long long>(v->exit_count),
                 static_cast<unsigned long long>(steps), static_cast<unsigned long long>(blocks),
                 static_cast<unsigned long long>(v->counted));
    // Where the exits went (bench/stepper_bench, and why a run costs what it costs).
    if (v->kvm_stepper) {
      const StepController::Stats& st = v->kvm_stepper->stats();
      std::fprintf(stderr,
                   "pmuvm: vcpu%u: exits by kind: debug %llu, I/O %llu, MSR %llu, other %llu; "
                   "stepper: user steps %llu, single steps %llu, kernel steps %llu, return stops "
                   "%llu (%llu into counted user mode), interrupt windows %llu, guest #DBs %llu, "
                   "missed returns %llu; blocks %llu of %llu instructions, blocks refused for "
                   "lack of debug slots %llu\n",
                   v->kvm->index(), static_cast<unsigned long long>(v->debug_exits),
                   static_cast<unsigned long long>(v->io_exits),
                   static_cast<unsigned long long>(v->msr_exits),
                   static_cast<unsigned long long>(v->exit_count - v->debug_exits - v->io_exits -
                                                   v->msr_exits),
                   static_cast<unsigned long long>(st.user_steps),
                   static_cast<unsigned long long>(st.single_steps),
                   static_cast<unsigned long long>(st.kernel_steps),
                   static_cast<unsigned long long>(st.return_stops),
                   static_cast<unsigned long long>(st.user_returns),
                   static_cast<unsigned long long>(st.interrupt_windows),
                   static_cast<unsigned long long>(st.guest_debug_exceptions),
                   static_cast<unsigned long long>(st.missed_returns),
                   static_cast<unsigned long long>(st.blocks),
                   static_cast<unsigned long long>(st.block_instructions),
                   static_cast<unsigned long long>(st.blocks_refused_for_slots));
    }
    // The host backend: what a host PMU would have cost. With the double the guest was stepped
    // through its free runs too; a host PMU has one kick per overflow instead of those steps.
    if (v->host_counters) {
      const Vcpu::HostStats& h = v->host_stats;
      const uint64_t pmu_exits = v->exit_count - h.steps_while_free + h.overflow_ends;
      std::fprintf(stderr,
                   "pmuvm: vcpu%u: host backend: free runs %llu, ended by overflow %llu, unseen "
                   "instructions %llu, overshoots %llu, exits with a host PMU %llu (%.4f per "
                   "counted instruction)\n",
                   v->kvm->index(), static_cast<unsigned long long>(h.free_runs),
                   static_cast<unsigned long long>(h.overflow_ends),
                   static_cast<unsigned long long>(h.unseen_instructions),
                   static_cast<unsigned long long>(h.overshoots),
                   static_cast<unsigned long long>(pmu_exits),
                   v->counted ? static_cast<double>(pmu_exits) / v->counted : 0.0);
    }
  }
}

void Machine::Impl::write_report() {
  const std::string text = report.render();
  if (options.lwp_report == "-") {
    std::fputs(text.c_str(), stdout);
    return;
  }
  std::ofstream out(options.lwp_report);
  out << text;
  if (!out) spdlog::error("cannot write LWP report {}", options.lwp_report);
}

Machine::Machine(MachineOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
GuestRam& Machine::ram() { return impl_->ram; }
void Machine::set_restored_state(StateSections state) { impl_->options.restore->state = std::move(state); }

std::vector<std::string> host_cpuid_refusals(const SnapshotManifest& m,
                                             const std::string& kvm_device) {
  return cpuid_refusals(KvmSystem(kvm_device), m, pv_features_for(options_from_manifest(m).stepper));
}

MachineOptions options_from_manifest(const SnapshotManifest& m) {
  MachineOptions o;
  o.profile = m.profile;
  o.vcpus = m.vcpus;
  o.mem_mib = m.mem_mib;
  o.seed = m.seed;
  o.timer_hz = m.timer_hz;
  o.stepper = parse_stepper(m.stepper).value_or(StepperKind::kNone);  // parse_manifest checked it
  if (m.linux_guest) o.linux_guest.emplace();  // the run loop's Linux rules; nothing to load
  o.kernel_name = m.kernel;
  o.max_interrupts_per_second = m.max_interrupt_rate;
  return o;
}
Machine::~Machine() = default;
int Machine::run() { return impl_->run(); }
void Machine::set_up_kvm() { impl_->set_up_kvm(); }

}  // namespace vmm
