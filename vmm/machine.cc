#include "vmm/machine.h"

#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>

#include "guest/abi/pmuvm_abi.h"
#include "pmu/rate_limited_interrupt_sink.h"
#include "pmu/state_archive.h"
#include "vmm/boot/long_mode.h"
#include "vmm/cpu/cpuid_table.h"
#include "vmm/devices/cmos_rtc.h"
#include "vmm/devices/i8042_reset.h"
#include "vmm/devices/lvt_performance_counter.h"
#include "vmm/devices/serial_16550.h"
#include "vmm/kvm/exit_history.h"
#include "vmm/kvm/kvm_vcpu.h"
#include "vmm/precise/guest_assisted_stepper.h"
#include "vmm/precise/kvm_stepper.h"
#include "vmm/report/lwp_report.h"
#include "vmm/report/lwp_trace.h"
#include "vmm/api/api_server.h"
#include "vmm/machine_api.h"
#include "vmm/machine_control.h"
#include "vmm/vcpu_control_block.h"
#include "vmm/vmm_error.h"

namespace vmm {
namespace {

constexpr uint32_t kMsrMiscEnable = 0x1A0;
constexpr uint32_t kMsrLstar = 0xC0000082;
constexpr uint32_t kMsrLwpcbAddress = 0xC0000106;  // LWPMSR1
// A Linux guest's panic() ends with this console line (kernel/panic.c); the run ends there.
constexpr std::string_view kLinuxPanicEnd = "---[ end Kernel panic - not syncing: ";
// Steps a Linux kernel path may take on its way to user mode after it started something that
// counts (KvmStepper, seeking) before the VMM gives up on it and lets it run free.
constexpr uint64_t kSeekStepLimit = 2'000'000;
constexpr int kKickSignal = SIGUSR1;
// SIGINT/SIGTERM: the run stops between instructions with status 128 + N and says where each
// vCPU was (a hung guest can be looked at, not just killed). Set by the handler, polled by the
// release ticker.
std::atomic<int> g_stop_signal{0};

struct SteadyClock : pmu::Clock {
  uint64_t now_ns() override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

// PMU interrupts of one vCPU. Threshold interrupts (LWP) are fixed-vector MSIs to its in-kernel
// LAPIC. A performance-counter interrupt (NetBurst overflow) goes where the guest programmed the
// LVT performance-counter entry: nothing while LVTPC is masked (it stays pending and is retried
// at every exit of the vCPU), NMI or the fixed vector by its delivery mode.
//
// Not modelled: Intel's mask-on-delivery (hardware sets LVTPC.mask when it delivers a PMI).
// KVM 6.1 has no ioctl that writes one LAPIC register; KVM_SET_LAPIC rewrites the whole state:
// it overwrites IRR bits raised since the KVM_GET_LAPIC (an IPI from another vCPU lost), restarts
// the timer from the saved count, and without APICv (this host) leaves an IRR bit it restores
// unnoticed until the next interrupt (KVM fixed that in 2024: "Refresh irr_pending on
// KVM_SET_LAPIC"; a stuck timer interrupt hangs a guest). Guests unmask LVTPC at the end of
// their PMI handler (Linux's P4 driver, the bundled kernel), so for them the only difference is
// that a second PMI could arrive inside the handler: NMIs are blocked there until IRET, and a
// fixed vector waits in IRR while IF = 0, so nothing nests in practice.
struct VcpuInterrupts : pmu::InterruptSink {
  KvmVm* vm = nullptr;
  KvmVcpu* vcpu = nullptr;
  uint32_t apic_id = 0;
  bool pmi_pending = false;

  void deliver_vector(uint8_t vector) override { vm->signal_msi(apic_id, vector); }
  void deliver_nmi() override { vcpu->nmi(); }
  void raise_performance_interrupt() override {
    pmi_pending = true;
    deliver_pending_pmi();
  }
  void deliver_pending_pmi() {
    if (!pmi_pending) return;
    // A read: KVM_GET_LAPIC changes nothing.
    const PmiDelivery d = route_pmi(vcpu->lapic_register(kLvtpcOffset));
    switch (d.route) {
      case PmiDelivery::Route::kHeld: return;  // retried at the next exit
      case PmiDelivery::Route::kNmi: vcpu->nmi(); break;
      case PmiDelivery::Route::kFixed: vm->signal_msi(apic_id, d.vector); break;
      case PmiDelivery::Route::kUnsupported:
        spdlog::warn("vCPU {}: LVTPC delivery mode {} is not supported; PMI dropped",
                     vcpu->index(), d.delivery_mode);
        break;
    }
    pmi_pending = false;
  }
};

// LWP's #PF traps of one vCPU (DESIGN §4.1). The unit raises at most one per retired instruction,
// from inside VcpuControlBlock::retire(); the run loop takes it right after that call and delivers
// it at the instruction boundary the vCPU stopped at (Impl::deliver_page_fault).
struct VcpuPageFaults : pmu::PageFaultSink {
  struct Fault {
    uint64_t linear;
    uint32_t error_code;
  };
  std::optional<Fault> pending;
  uint64_t delivered = 0;
  uint64_t dropped = 0;  // raised by an instruction whose next boundary is in the kernel (SYSCALL)

  void raise_page_fault(uint64_t linear, uint32_t error_code) override {
    pending = Fault{linear, error_code};
  }
};

// The paravirtual features the bundled kernel is offered (guest/abi/pmuvm_abi.h).
uint32_t pv_features_for(MachineOptions::Stepper stepper) {
  switch (stepper) {
    case MachineOptions::Stepper::kGuest: return PMUVM_PV_USER_ENTRY | PMUVM_PV_GUEST_STEPPER;
    case MachineOptions::Stepper::kKvm: return PMUVM_PV_USER_ENTRY | PMUVM_PV_PROFILED_ENTRY;
    case MachineOptions::Stepper::kNone: break;
  }
  return PMUVM_PV_USER_ENTRY;
}

// The stepper as a snapshot's manifest names it (options_from_manifest reads it back).
const char* stepper_name(MachineOptions::Stepper stepper) {
  switch (stepper) {
    case MachineOptions::Stepper::kKvm: return "kvm";
    case MachineOptions::Stepper::kGuest: return "guest";
    case MachineOptions::Stepper::kNone: break;
  }
  return "none";
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

pmu::cache::Geometry to_cache_geometry(const CacheGeometry& g) {
  auto level = [](const CacheLevel& l) {
    return pmu::cache::LevelGeometry{l.size_kib * 1024, l.ways, l.latency_cycles};
  };
  pmu::cache::Geometry out;
  out.line_size = g.line_size;
  out.l1d = level(g.l1d);
  out.l2 = level(g.l2);
  if (g.l3) out.l3 = level(*g.l3);
  out.dram_latency_cycles = g.dram_latency_cycles;
  return out;
}

// What the PMU models of one vCPU raise, on its way to the rate limiter. A threshold vector is
// reported for the task running now (its LWPCB stored the record) together with whether the
// limiter folded it into an interrupt it already held. Counting at request time keeps a held
// interrupt that goes out later, while another task or the idle loop runs, with the task that
// asked for it, and makes "requested = delivered + coalesced" checkable per task.
struct RequestTap : pmu::InterruptSink {
  pmu::RateLimitedInterruptSink* limited = nullptr;
  std::function<void(bool coalesced)> on_vector;  // reporting hook (threshold interrupts per task)

  void deliver_vector(uint8_t vector) override {
    const uint64_t before = limited->coalesced();
    limited->deliver_vector(vector);
    if (on_vector) on_vector(limited->coalesced() != before);
  }
  void deliver_nmi() override { limited->deliver_nmi(); }
  void raise_performance_interrupt() override { limited->raise_performance_interrupt(); }
};

std::string describe_registers(KvmVcpu& vcpu) {
  char buf[512];
  try {
    const kvm_regs r = vcpu.regs();
    const kvm_sregs s = vcpu.sregs();
    std::snprintf(buf, sizeof buf,
                  "rip=%#llx rsp=%#llx rflags=%#llx rax=%#llx rbx=%#llx rcx=%#llx rdx=%#llx "
                  "rsi=%#llx rdi=%#llx cs=%#x cr0=%#llx cr2=%#llx cr3=%#llx cr4=%#llx efer=%#llx",
                  r.rip, r.rsp, r.rflags, r.rax, r.rbx, r.rcx, r.rdx, r.rsi, r.rdi, s.cs.selector,
                  s.cr0, s.cr2, s.cr3, s.cr4, s.efer);
  } catch (const VmmError& e) {
    return std::string("(registers unavailable: ") + e.what() + ")";
  }
  return buf;
}

}  // namespace

struct Machine::Impl : MachineControl {
  MachineOptions options;
  GuestRam ram;
  LoadedGuest loaded;
  std::unique_ptr<KvmSystem> kvm;
  std::unique_ptr<KvmVm> vm;
  SteadyClock clock;
  Serial16550 serial{[this](char c) { console_output(c); }};
  std::mutex serial_lock;  // serial, rtc and console_line
  CmosRtc rtc;
  I8042Reset i8042;
  std::string console_line;  // a Linux guest's current console line (panic detection)
  LinuxBoot linux_boot;

  struct Vcpu {
    std::unique_ptr<KvmVcpu> kvm;
    VcpuInterrupts interrupts;
    VcpuPageFaults page_faults;
    std::unique_ptr<pmu::RateLimitedInterruptSink> limited;
    RequestTap tap;  // the PMU models' sink: reports, then hands over to `limited`
    std::unique_ptr<VcpuControlBlock> control;
    std::unique_ptr<GuestAssistedStepper> stepper;  // precise backend, guest-assisted (or none)
    std::unique_ptr<KvmStepper> kvm_stepper;        // precise backend, KVM single-step (or none)
    bool stepping = false;  // KVM single-step is on for the next KVM_RUN
    std::optional<uint64_t> run_to;  // no single-step; the breakpoint where user mode resumes
    // The last exit was a CPL-3 single step after an instruction that leaves RFLAGS.TF alone, so
    // the guest-debug state of the last KVM_SET_GUEST_DEBUG (`step_breakpoint`) still holds.
    bool tf_kept = false;
    std::optional<uint64_t> step_breakpoint;
    // In the kernel with nothing announced while a task is profiled: #DB intercepted only, so
    // the TF a kernel path restores into user mode unannounced traps here, not in the guest.
    bool intercepting = false;
    // A Linux guest started something that counts while in its kernel (it loaded an LWPCB or
    // enabled a counter): no frame on its way out carries TF, so the kernel is stepped, with
    // interrupts held (BLOCKIRQ), until user mode is reached (KvmStepper's header).
    bool seeking = false;
    uint64_t seek_steps = 0;
    bool syscall_entry_known = false;  // Linux: KvmStepper's LSTAR read from the vCPU
    // Linux: an unstepped SYSCALL hit the entry-point breakpoint while #DB was only intercepted
    // (a signal handler's): no breakpoint there until user mode traps again.
    bool skip_syscall_bp = false;
    // Linux: R11 as the kernel's SYSRET left it, before pmuvm set TF in it (restored at the trap).
    std::optional<uint64_t> sysret_r11;
    uint64_t counted = 0;   // CPL-3 instructions a stepper handed to the PMU models
    std::atomic<uint32_t> task{0};  // the guest task running here (PMUVM_MSR_TASK)
    std::atomic<pthread_t> thread{0};  // set by the thread itself; read by finish()
    // Steady-clock time at which interrupts held by the rate limiter can go out (0 = none held).
    // Published by the vCPU thread after every exit; the release ticker kicks the vCPU then, since
    // a guest halted inside KVM (in-kernel LAPIC) makes no exit that would poll the limiter.
    std::atomic<uint64_t> release_at_ns{0};
    // The last exit was an I/O port or MSR access: KVM finishes it (the IN's data, RDMSR's
    // result, RIP past it) only in the next KVM_RUN, so the vCPU cannot be parked for a snapshot
    // before one more KVM_RUN (with immediate_exit: nothing else runs).
    bool needs_completion = false;
    // Restored from a snapshot: KVM holds none of the guest-debug state the shadow fields above
    // describe, so update_stepping issues it once whatever they say.
    bool debug_unknown = false;
    ExitHistory exits;  // the last exits, told when the guest dies (registers lost on AMD)

    // Snapshot / migration of the bookkeeping above (the models have their own archives).
    template <class Archive>
    void archive(Archive& a) {
      uint32_t t = task;
      a(stepping, run_to, tf_kept, step_breakpoint, intercepting, seeking, seek_steps,
        syscall_entry_known, skip_syscall_bp, sysret_r11, counted, t, interrupts.pmi_pending,
        page_faults.delivered, page_faults.dropped);
      task = t;
    }
  };
  std::vector<std::unique_ptr<Vcpu>> vcpus;

  std::atomic<bool> stop{false};
  // Parking every vCPU between instructions (pause(), snapshots, migration).
  std::mutex pause_lock;
  std::condition_variable pause_changed;
  std::atomic<bool> pause_requested{false};
  uint32_t pause_depth = 0;   // nested pause() calls (a user's vm.pause, then a snapshot)
  uint32_t parked = 0;        // vCPU threads waiting in park()
  bool migrated_away = false; // handed over to a migration destination: no report here
  std::vector<CpuidEntry> guest_cpuid;  // the table the guest sees (before per-vCPU APIC IDs)
  std::mutex stop_lock;  // with stop_signal: wakes the release ticker at the end of the run
  std::condition_variable stop_signal;
  std::atomic<int> exit_status{0};
  std::mutex failure_lock;
  std::string failure;  // a VMM failure ends the run with status 3

  std::mutex report_lock;
  LwpReport report;
  std::map<uint64_t, uint32_t> linux_tasks;  // CR3 -> report task number (Linux guests)

  uint32_t linux_task(uint64_t cr3) {
    std::lock_guard<std::mutex> g(report_lock);
    auto [it, added] = linux_tasks.emplace(cr3, static_cast<uint32_t>(linux_tasks.size() + 1));
    if (added) {
      char name[48];
      std::snprintf(name, sizeof name, "CR3 %#llx", static_cast<unsigned long long>(cr3));
      report.set_task_name(it->second, name);
    }
    return it->second;
  }
  std::ofstream trace;

  uint32_t pv_features() const { return pv_features_for(options.stepper); }

  // Asked once: spdlog's level check goes through its registry, a visible cost at every step.
  const bool trace_steps = spdlog::should_log(spdlog::level::trace);

  bool is_linux() const { return options.linux_guest.has_value(); }

  explicit Impl(MachineOptions o) : options(std::move(o)), ram(options.mem_mib << 20) {
    if (options.restore) return;  // RAM comes from the snapshot or the migration stream
    if (is_linux()) {
      const MachineOptions::LinuxGuest& g = *options.linux_guest;
      LinuxBootOptions boot{g.cmdline, g.initrd, g.initrd_name, options.vcpus,
                            encode_cpuid_signature(options.profile.family, options.profile.model,
                                                   options.profile.stepping),
                            0 /* feature flags: Linux reads only the APIC IDs and CPU flags */};
      auto loaded_linux = load_linux(ram, g.bzimage, g.image, options.kernel_name, boot);
      if (auto* error = std::get_if<std::string>(&loaded_linux)) throw UsageError(*error);
      linux_boot = std::get<LinuxBoot>(loaded_linux);
      return;
    }
    auto result = load_guest(ram, options.kernel, options.kernel_name, options.programs,
                             BootParameters{options.vcpus, pv_features(),
                                            options.timer_hz ? options.timer_hz : PMUVM_TIMER_OFF});
    if (auto* error = std::get_if<std::string>(&result)) throw UsageError(*error);
    loaded = std::get<LoadedGuest>(result);
  }

  // COM1's output: to stdout, flushed per line. A Linux panic's last line ends the run (status 3)
  // instead of leaving it hanging in the panic loop. Called under serial_lock.
  void console_output(char c) {
    std::fputc(c, stdout);
    if (c != '\n') {
      if (is_linux() && console_line.size() < 512) console_line.push_back(c);
      return;
    }
    std::fflush(stdout);
    if (is_linux() && console_line.rfind(kLinuxPanicEnd, 0) == 0) {
      std::string reason = console_line.substr(kLinuxPanicEnd.size());
      if (const size_t end = reason.rfind(" ]---"); end != std::string::npos) reason.resize(end);
      fail("Linux guest kernel panic: " + reason);
    }
    console_line.clear();
  }

  void fail(const std::string& reason) {
    {
      std::lock_guard<std::mutex> g(failure_lock);
      if (failure.empty()) failure = reason;
    }
    finish(PMUVM_EXIT_PANIC);
  }

  void finish(int status) {
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

  // Makes the vCPU leave (or not enter) KVM_RUN: immediate_exit covers a thread that is about to
  // enter, the signal one that is inside. The vCPU thread clears immediate_exit after each return
  // and only then looks at what it was kicked for, so no kick is lost.
  static void kick(Vcpu& v) {
    v.kvm->run_state()->immediate_exit = 1;
    if (const pthread_t t = v.thread.load()) pthread_kill(t, kKickSignal);
  }

  void interrupted_by(int sig) {
    {
      std::lock_guard<std::mutex> g(failure_lock);
      if (failure.empty()) interrupted_signal = sig;
    }
    finish(128 + sig);
  }
  int interrupted_signal = 0;

  // Wakes each vCPU when interrupts its rate limiter held may go out (storm protection must
  // delay interrupts, never lose or strand them).
  void release_ticker() {
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
      for (auto& v : vcpus) {
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

  void handle_io(Vcpu& v) {
    kvm_run* run = v.kvm->run_state();
    auto* data = reinterpret_cast<uint8_t*>(run) + run->io.data_offset;
    const uint16_t port = run->io.port;
    if (port == PMUVM_PORT_EXIT && run->io.direction == KVM_EXIT_IO_OUT && run->io.size == 4) {
      uint32_t status = 0;
      std::memcpy(&status, data, 4);
      spdlog::debug("guest reported exit status {}", status);
      finish(static_cast<int>(status & 0xFF));
      return;
    }
    const bool out = run->io.direction == KVM_EXIT_IO_OUT;
    for (uint32_t i = 0; i < run->io.count; ++i, data += run->io.size) {
      std::lock_guard<std::mutex> g(serial_lock);
      if (serial.owns(port)) {
        if (out) serial.write(port, data[0]);
        else data[0] = serial.read(port);
      } else if (rtc.owns(port)) {
        if (out) rtc.write(port, data[0]);
        else data[0] = rtc.read(port);
      } else if (i8042.owns(port)) {
        if (!out) data[0] = i8042.read(port);
        else if (i8042.write(port, data[0])) {
          spdlog::info("vCPU {}: guest reset the machine (i8042 command 0xFE): exit status 0",
                       v.kvm->index());
          finish(0);
          return;
        }
      } else if (!out) {
        std::memset(data, 0xFF, run->io.size);  // no device: reads float high, writes are dropped
      }
    }
  }

  void handle_msr(Vcpu& v, bool write) {
    kvm_run* run = v.kvm->run_state();
    const kvm_sregs s = v.kvm->exit_sregs();
    // CPL is SS.DPL (architecturally equal to it; AMD keeps CPL there, and KVM's SVM code reports
    // it so). A selector's RPL is what the guest loaded, not the privilege level.
    const uint8_t cpl = s.ss.dpl;
    const uint32_t msr = run->msr.index;
    run->msr.error = 0;
    if (write) {
      const StepContext ctx{s.cr3, s.fs.base, s.gs.base};
      switch (msr) {
        case PMUVM_MSR_USER_ENTRY:
          v.control->enter_user(s.cr3);  // completes a deferred LLWPCB before ring 3 (§5.3)
          if (v.kvm_stepper) {
            const StepScope scope = step_scope(v);
            if (scope == StepScope::kUserCode)  // run free into the task, then step
              // A SYSCALL this return settles: its boundary, in the kernel (CPL 0), is past.
              retire_all(v, v.kvm_stepper->on_user_entry(run->msr.data, ctx), cpl, s.cr3);
            else if (scope == StepScope::kNothing)
              v.kvm_stepper->stop();  // nothing counts in this task: no stale breakpoint
          }
          if (v.stepper)
            if (auto retired = v.stepper->on_user_entry(run->msr.data, ctx)) {
              v.control->retire(*retired, s.cr3);
              // A SYSCALL counted late: its next boundary was in the kernel (pmuvm_abi.h).
              deliver_page_fault(v, [](const VcpuPageFaults::Fault&) { return false; });
            }
          return;
        case PMUVM_MSR_STEP:
          if (!v.stepper) break;  // not offered: #GP, the kernel stops stepping
          if (auto retired = v.stepper->on_step(run->msr.data, ctx)) {
            v.control->retire(*retired, s.cr3);
            ++v.counted;
            // The #DB handler's frame is the boundary after the instruction: the kernel handles
            // it as a user #PF when the VMM marks it (PMUVM_VECTOR_LWP_PAGE_FAULT).
            const uint64_t frame = run->msr.data;
            deliver_page_fault(v, [&](const VcpuPageFaults::Fault& f) {
              if (!v.stepper->mark_page_fault(frame, f.error_code)) return false;
              v.kvm->set_cr2(f.linear);
              return true;
            });
          }
          return;
        case PMUVM_MSR_TASK: v.task = static_cast<uint32_t>(run->msr.data); return;
        default: break;
      }
      // Linux names no tasks: an LWPCB loaded on a context switch or by LLWPCB belongs to the
      // process whose address space is current, numbered in the order they first profile (a
      // page-table root the kernel reuses for a later process keeps its number).
      if (is_linux() && msr == kMsrLwpcbAddress && run->msr.data != 0) v.task = linux_task(s.cr3);
      const MsrOutcome o = v.control->write_msr(msr, run->msr.data, cpl, s.cr3);
      run->msr.error = (!o.handled || o.general_protection) ? 1 : 0;
      // A Linux kernel loaded an LWPCB or enabled a counter: the way back to user mode has no
      // frame with TF, so it is stepped (update_stepping). Any announced return is moot.
      if (is_linux() && v.kvm_stepper && cpl == 0 && !run->msr.error &&
          step_scope(v) == StepScope::kUserCode) {
        if (trace_steps)
          spdlog::trace("vCPU {}: WRMSR {:#x} at CPL 0: stepping to user mode", v.kvm->index(), msr);
        v.seeking = true;
        v.seek_steps = 0;
        v.kvm_stepper->stop();
      }
    } else {
      if (msr == kMsrMiscEnable && options.profile.misc_enable) {
        run->msr.data = *options.profile.misc_enable;
        return;
      }
      const MsrOutcome o = v.control->read_msr(msr, cpl, s.cr3);
      run->msr.data = o.value;
      run->msr.error = (!o.handled || o.general_protection) ? 1 : 0;
    }
    if (run->msr.error)
      spdlog::debug("vCPU {}: {} MSR {:#x} at CPL {} -> #GP", v.kvm->index(),
                    write ? "WRMSR" : "RDMSR", msr, cpl);
  }

  // The fatal exit's message tail: the exits before it, oldest first (ExitHistory).
  static std::string last_exits(const Vcpu& v) {
    return "\nthe last exits of this vCPU before it (the fatal one last):\n" + v.exits.describe();
  }

  // Returns false when the vCPU must stop.
  bool dispatch(Vcpu& v) {
    kvm_run* run = v.kvm->run_state();
    switch (run->exit_reason) {
      case KVM_EXIT_IO: handle_io(v); return true;
      case KVM_EXIT_X86_RDMSR: handle_msr(v, false); return true;
      case KVM_EXIT_X86_WRMSR: handle_msr(v, true); return true;
      case KVM_EXIT_INTR: return true;
      case KVM_EXIT_DEBUG: on_step(v); return true;
      case KVM_EXIT_HLT: return true;  // in-kernel LAPIC: not expected, harmless
      case KVM_EXIT_MMIO:
        spdlog::warn("vCPU {}: MMIO {} at {:#x} with no device", v.kvm->index(),
                     run->mmio.is_write ? "write" : "read", run->mmio.phys_addr);
        if (!run->mmio.is_write) std::memset(run->mmio.data, 0xFF, sizeof run->mmio.data);
        return true;
      case KVM_EXIT_SHUTDOWN: {
        if (is_linux()) {  // Linux's last reboot method (BOOT_TRIPLE), as on a PC: a reset
          spdlog::info("vCPU {}: guest triple fault (a Linux reboot): exit status 0",
                       v.kvm->index());
          finish(0);
          return false;
        }
        // On AMD, KVM re-initialises the VMCB after a shutdown intercept (its contents are
        // undefined then), so the registers read back are the reset state, not the crash site.
        const kvm_regs r = v.kvm->regs();
        const bool reset_state = r.rip == 0xFFF0 && v.kvm->sregs().cs.selector == 0xF000;
        fail("guest triple fault on vCPU " + std::to_string(v.kvm->index()) + ": " +
             (reset_state ? "registers lost (KVM on AMD SVM resets the vCPU on a shutdown; "
                            "after the reset: " + describe_registers(*v.kvm) + ")"
                          : describe_registers(*v.kvm)) +
             last_exits(v));
        return false;
      }
      case KVM_EXIT_FAIL_ENTRY:
        fail("KVM could not enter vCPU " + std::to_string(v.kvm->index()) +
             " (hardware reason " +
             std::to_string(run->fail_entry.hardware_entry_failure_reason) + "): " +
             describe_registers(*v.kvm) + last_exits(v));
        return false;
      case KVM_EXIT_INTERNAL_ERROR:
        fail("KVM internal error " + std::to_string(run->internal.suberror) + " on vCPU " +
             std::to_string(v.kvm->index()) + ": " + describe_registers(*v.kvm) + last_exits(v));
        return false;
      default:
        fail("unexpected KVM exit reason " + std::to_string(run->exit_reason) + " on vCPU " +
             std::to_string(v.kvm->index()));
        return false;
    }
  }

  // KVM stepper (DESIGN §4.7): step only while something counts on this vCPU. LWP counts CPL-3
  // execution only, and so do NetBurst counters without T0_OS: then only user code is stepped.
  // The kernel announces each return into a profiled task (PMUVM_PV_PROFILED_ENTRY) with its trap
  // frame; the kernel then runs free to the frame's RIP (an instruction breakpoint), and stepping
  // resumes there. While a NetBurst counter counts at CPL 0, every CPL is stepped.
  // KVM_SET_GUEST_DEBUG is re-issued before a KVM_RUN unless the last exit was a user-mode step
  // after an instruction that leaves TF alone: KVM sets TF when it is issued, and POPF, IRET,
  // interrupt delivery and KVM's own instruction emulation can drop it.
  enum class StepScope { kNothing, kUserCode, kEveryCpl };
  static StepScope step_scope(const Vcpu& v) {
    const pmu::netburst::NetburstPmu* netburst = v.control->netburst();
    if (netburst && netburst->wants_kernel_events()) return StepScope::kEveryCpl;
    if (v.control->lwp().wants_events() || (netburst && netburst->wants_events()))
      return StepScope::kUserCode;
    return StepScope::kNothing;
  }

  void update_stepping(Vcpu& v) {
    const bool reissue = std::exchange(v.debug_unknown, false);
    const uint8_t cpl = v.kvm->exit_sregs().ss.dpl;
    const StepScope scope = step_scope(v);
    const bool every_cpl = scope == StepScope::kEveryCpl;
    const bool user_only = scope == StepScope::kUserCode;
    if (is_linux() && scope != StepScope::kNothing && !v.syscall_entry_known) {
      v.kvm_stepper->set_unannounced_kernel(v.kvm->msr(kMsrLstar));  // Linux set it at boot
      v.syscall_entry_known = true;
    }
    if (v.seeking && (!user_only || cpl == 3)) v.seeking = false;  // user mode reached, or moot
    if (cpl == 3) v.skip_syscall_bp = false;
    if (v.seeking && ++v.seek_steps > kSeekStepLimit) {
      spdlog::warn("vCPU {}: the guest kernel did not return to user mode within {} steps after "
                   "it started counting; it runs free (instructions until the next interrupt "
                   "are not counted)", v.kvm->index(), kSeekStepLimit);
      v.seeking = false;
    }
    if (v.seeking) {
      v.kvm->set_single_step(true, std::nullopt, /*block_irq=*/true);  // TF may be lost (IRET)
      v.stepping = true;
      v.step_breakpoint.reset();
      v.run_to.reset();
      v.intercepting = false;
      return;
    }
    const std::optional<uint64_t>& resume = v.kvm_stepper->resume_rip();
    if (user_only && cpl == 3 && resume) {
      // User mode was reached without passing the breakpoint (the kernel resumed elsewhere than
      // its frame said): stepping resumes here; what ran since was not counted.
      spdlog::warn("vCPU {}: user mode resumed at {:#x}, not at the announced {:#x}; instructions "
                   "in between were not counted", v.kvm->index(), v.kvm->exit_regs().rip, *resume);
      v.kvm_stepper->on_user_arrival(user_state(v));
    }
    if (every_cpl || (user_only && cpl == 3)) {
      // In user mode, a breakpoint on the SYSCALL entry point reports SYSCALL as it retires
      // (its single-step trap is not delivered: FMASK clears TF), so it counts with the PMU
      // state of that moment (a pmc_config that enables a counter must not count itself).
      const std::optional<uint64_t> bp =
          cpl == 3 ? std::optional<uint64_t>(v.kvm_stepper->syscall_entry()) : std::nullopt;
      if (reissue || !(v.stepping && v.tf_kept && v.step_breakpoint == bp))
        v.kvm->set_single_step(true, bp);
      v.step_breakpoint = bp;
      v.stepping = true;
      v.run_to.reset();
      v.intercepting = false;
      return;
    }
    // User mode left: nothing steps in the kernel (unless a return into the task was already
    // announced: an NMI handler's return reaches USER_ENTRY with no exit before it).
    if (v.stepping && !v.kvm_stepper->resume_rip()) v.kvm_stepper->stop();
    if (user_only && resume) {
      // Re-programmed when the announced RIP changes: a return can be announced, then another
      // task chosen (a tick on the way out) and announced in its turn.
      if (reissue || v.run_to != resume) v.kvm->set_single_step(false, resume);
      v.run_to = resume;
      v.intercepting = false;
    } else if (user_only) {
      // A profiled task is in the kernel and no return is announced yet (an NMI handler returns
      // without one): the frame it returns through carries the TF of its stepping. Linux: its
      // first instruction there may be a SYSCALL (an interrupt came just before one), which
      // raises no trap (FMASK clears TF): the breakpoint on the SYSCALL entry point stays.
      const std::optional<uint64_t> bp =
          is_linux() && !v.skip_syscall_bp ? std::optional<uint64_t>(v.kvm_stepper->syscall_entry())
                                           : std::nullopt;
      if (reissue || !v.intercepting || v.stepping || v.run_to || v.step_breakpoint != bp) {
        if (bp) v.kvm->set_single_step(false, bp);
        else v.kvm->intercept_debug_traps();
      }
      v.step_breakpoint = bp;
      v.intercepting = true;
      v.run_to.reset();
    } else if (is_linux() && (v.stepping || v.run_to || v.intercepting)) {
      // Nothing counts, but frames pushed while the task was stepped still carry TF: #DB stays
      // intercepted for good, and a stray trap clears TF (on_step).
      if (reissue || v.stepping || v.run_to || !v.intercepting || v.step_breakpoint)
        v.kvm->intercept_debug_traps();
      v.step_breakpoint.reset();
      v.run_to.reset();
      v.intercepting = true;
    } else if (v.stepping || v.run_to || v.intercepting) {
      v.kvm->set_single_step(false);
      v.run_to.reset();
      v.intercepting = false;
    }
    v.stepping = false;
  }

  // The vCPU's registers at this exit, as the steppers see them.
  static GuestRegisters user_state(Vcpu& v) {
    const kvm_sregs s = v.kvm->exit_sregs();
    GuestRegisters g = general_registers(v.kvm->exit_regs());
    g.fs_base = s.fs.base, g.gs_base = s.gs.base;
    g.cr3 = s.cr3;
    return g;
  }

  // One KVM single-step exit: the state after an instruction.
  void on_step(Vcpu& v) {
    const kvm_run* run = v.kvm->run_state();
    constexpr uint64_t kDr6Step = 1u << 14, kDr6Breakpoint0 = 1u << 0;
    if (v.kvm_stepper && v.run_to && (run->debug.arch.dr6 & kDr6Breakpoint0) &&
        v.kvm->exit_sregs().ss.dpl == 3) {
      v.kvm_stepper->on_user_arrival(user_state(v));  // user mode resumes: step from here
      if (trace_steps)
        spdlog::trace("vCPU {}: user mode resumes at the breakpoint", v.kvm->index());
      return;
    }
    if (v.kvm_stepper && (v.intercepting || (is_linux() && v.run_to)) &&
        (run->debug.arch.dr6 & kDr6Step) && v.kvm->exit_sregs().ss.dpl == 3) {
      // The unannounced return's TF trap: one user instruction ran since the kernel's IRETQ (with
      // Linux also where a SYSCALL's return was expected: a signal handler's sigreturn).
      const GuestRegisters g = user_state(v);
      if (trace_steps)
        spdlog::trace("vCPU {}: unannounced return, trap at rip {:#x}", v.kvm->index(), g.rip);
      if (const std::optional<uint64_t> r11 = std::exchange(v.sysret_r11, std::nullopt)) {
        kvm_regs r = v.kvm->regs();
        if (r.r11 == (*r11 | KvmVcpu::kTrapFlag)) {  // unless the instruction wrote R11 itself
          r.r11 = *r11;
          v.kvm->set_regs(r);
        }
      }
      retire_all(v, v.kvm_stepper->on_unannounced_return(g), 3, g.cr3);
      // Nothing counts any more: the TF the frame restored must not reach the guest's #DB.
      if (is_linux() && step_scope(v) == StepScope::kNothing) v.kvm->clear_trap_flag();
      return;
    }
    if (v.kvm_stepper && is_linux() && v.intercepting && (run->debug.arch.dr6 & kDr6Breakpoint0) &&
        v.kvm->exit_sregs().ss.dpl == 0) {
      // The SYSCALL entry point, reached by the first instruction after an unannounced return.
      const GuestRegisters g = user_state(v);
      if (trace_steps) spdlog::trace("vCPU {}: unannounced return, then SYSCALL", v.kvm->index());
      const Retirements retired = v.kvm_stepper->on_unannounced_syscall(g, g.cr3);
      v.skip_syscall_bp = retired.empty();
      retire_all(v, retired, 0, g.cr3);
      return;
    }
    if (is_linux() && !v.stepping && (run->debug.arch.dr6 & kDr6Step)) {
      // A TF restored from a frame of a stepped task, caught after nothing counts: pmuvm's, not
      // the guest's (which cannot single-step under pmuvm's #DB interception, README).
      v.kvm->clear_trap_flag();
      return;
    }
    if (!v.kvm_stepper || !v.stepping || !(run->debug.arch.dr6 & (kDr6Step | kDr6Breakpoint0))) {
      spdlog::warn("vCPU {}: debug exit that is not a pmuvm single step (exception {}, dr6 {:#x}, "
                   "rip {:#x}); ignored", v.kvm->index(), run->debug.arch.exception,
                   run->debug.arch.dr6, run->debug.arch.pc);
      return;
    }
    const kvm_sregs s = v.kvm->exit_sregs();
    const uint8_t cpl = s.ss.dpl;
    const GuestRegisters g = user_state(v);
    const Retirements retired = v.kvm_stepper->on_step(g, cpl, s.cr3);
    if (trace_steps)
      spdlog::trace("vCPU {}: step to rip {:#x} at CPL {} (dr6 {:#x}{}), {} retired{}",
                    v.kvm->index(), g.rip, cpl, run->debug.arch.dr6, v.seeking ? ", seeking" : "",
                    retired.size(),
                    retired.empty() ? ""
                                    : fmt::format(", last at {:#x}", retired[retired.size() - 1].rip));
    // The last retirement a user-mode one: the user accountant's last instruction is that one.
    v.tf_kept = cpl == 3 && (run->debug.arch.dr6 & kDr6Step) && !retired.empty() &&
                retired[retired.size() - 1].cpl == 3 && !v.kvm_stepper->user_tf_may_be_clear();
    retire_all(v, retired, cpl, s.cr3);
    if (v.seeking && cpl == 0 && v.kvm_stepper->at_sysret(g, s.cr3)) {
      // SYSRET's own step trap is not delivered (nested AMD host, like SYSCALL's). User mode
      // resumes in a state known now: RIP = RCX, RFLAGS = R11. TF goes into R11, so the first
      // user instruction traps as after an unannounced return and counts; R11 is restored there.
      GuestRegisters user = g;
      user.rip = g.rcx;
      user.rflags = g.r11;
      retire_all(v, v.kvm_stepper->expect_user_entry(user), 0, s.cr3);
      kvm_regs r = v.kvm->regs();
      v.sysret_r11 = r.r11;
      r.r11 |= KvmVcpu::kTrapFlag;
      v.kvm->set_regs(r);
      v.seeking = false;
    }
  }

  // Hands a report's retirements to the PMU models. The exit is the boundary after the last one.
  // At CPL 0 that instruction was a SYSCALL reported at LSTAR: its user #PF cannot be delivered
  // in the kernel; nor can one of an earlier instruction of the same report, whose boundary is
  // past. (A SYSCALL counted by the re-entry fallback, KvmStepper's header, reaches here at CPL 3
  // and its trap is delivered at the re-entry boundary; the guest-assisted stepper drops it.)
  void retire_all(Vcpu& v, const Retirements& retired, uint8_t cpl, uint64_t cr3) {
    for (size_t i = 0; i < retired.size(); ++i) {
      v.control->retire(retired[i], cr3);
      if (retired[i].cpl == 3) ++v.counted;
      const bool last = i + 1 == retired.size();
      deliver_page_fault(v, [&](const VcpuPageFaults::Fault& f) {
        return last && cpl == 3 && v.kvm->inject_page_fault(f.linear, f.error_code);
      });
    }
  }

  // Delivers the #PF trap the LWP unit raised while retiring the instruction just handed to it, if
  // any, with `deliver` (false: it cannot be delivered at this boundary). An undelivered trap is
  // harmless: LWP's state did not change, so the next occurrence of the event raises it again.
  template <typename Deliver>
  void deliver_page_fault(Vcpu& v, Deliver deliver) {
    const std::optional<VcpuPageFaults::Fault> f = std::exchange(v.page_faults.pending, std::nullopt);
    if (!f) return;
    const bool delivered = deliver(*f);
    ++(delivered ? v.page_faults.delivered : v.page_faults.dropped);
    spdlog::debug("vCPU {}: LWP #PF trap at {:#x}, error {:#x}: {}", v.kvm->index(), f->linear,
                  f->error_code, delivered ? "delivered" : "not deliverable here, dropped");
  }

  void vcpu_loop(Vcpu& v) {
    v.thread = pthread_self();
    try {
      while (!stop) {
        const bool pausing = pause_requested.load();
        if (pausing && !v.needs_completion) {
          park();
          continue;
        }
        // A vCPU on its way to being parked only completes its last exit (immediate_exit: no
        // guest instruction runs), so its stepping state is left as it is.
        if (v.kvm_stepper && !pausing) update_stepping(v);
        if (pausing) v.kvm->run_state()->immediate_exit = 1;
        const int r = v.kvm->run();
        v.kvm->run_state()->immediate_exit = 0;  // before looking at why: see kick()
        // Any KVM_RUN, even one that returns EINTR at once, completes the previous exit's access.
        const uint32_t reason = v.kvm->run_state()->exit_reason;
        v.needs_completion = r >= 0 && (reason == KVM_EXIT_IO || reason == KVM_EXIT_MMIO ||
                                        reason == KVM_EXIT_X86_RDMSR ||
                                        reason == KVM_EXIT_X86_WRMSR);
        v.tf_kept = false;  // until on_step says otherwise
        if (r >= 0) v.exits.record(*v.kvm->run_state(), v.kvm->exit_regs(), v.kvm->exit_sregs());
        // A kick (r < 0) stops the vCPU between instructions: nothing retired, nothing changes.
        if (r >= 0 && v.kvm_stepper && v.kvm->run_state()->exit_reason != KVM_EXIT_DEBUG)
          v.kvm_stepper->on_other_exit(v.kvm->exit_sregs().ss.dpl);
        v.limited->poll();  // storm protection: release held interrupts when allowed
        v.interrupts.deliver_pending_pmi();  // a PMI waiting for the guest to unmask LVTPC
        if (r >= 0 && !dispatch(v)) return;  // r < 0: EINTR/EAGAIN, a kick; re-check stop
        v.release_at_ns = v.limited->next_release_ns().value_or(0);
      }
    } catch (const std::exception& e) {
      fail(e.what());
    }
  }

  // ---- Pausing, snapshots and migration (MigratableVm) ----------------------------------------

  // The vCPU thread waits here while a pause is requested (or until the run ends).
  void park() {
    std::unique_lock<std::mutex> lock(pause_lock);
    ++parked;
    pause_changed.notify_all();
    pause_changed.wait(lock, [&] { return !pause_requested || stop; });
    --parked;
  }

  bool pause() override {
    std::unique_lock<std::mutex> lock(pause_lock);
    if (pause_depth++ > 0) return !stop;
    pause_requested = true;
    for (auto& v : vcpus) kick(*v);
    pause_changed.wait(lock, [&] { return parked == vcpus.size() || stop; });
    if (stop) return false;
    // Everything the guest printed so far is in the output files now: what a snapshot or a
    // migration resumes continues exactly after it (the tests compare both halves).
    std::lock_guard<std::mutex> s(serial_lock);
    std::fflush(stdout);
    std::lock_guard<std::mutex> r(report_lock);
    if (trace.is_open()) trace.flush();
    return true;
  }

  void resume() override {
    std::lock_guard<std::mutex> lock(pause_lock);
    if (pause_depth == 0 || --pause_depth > 0) return;
    pause_requested = false;
    pause_changed.notify_all();
  }

  GuestRam& guest_ram() override { return ram; }

  SnapshotManifest manifest() override {
    SnapshotManifest m;
    m.vcpus = options.vcpus;
    m.mem_mib = options.mem_mib;
    m.seed = options.seed;
    m.timer_hz = options.timer_hz;
    m.stepper = stepper_name(options.stepper);
    m.linux_guest = is_linux();
    m.kernel = options.kernel_name;
    m.max_interrupt_rate = options.max_interrupts_per_second;
    m.profile = options.profile;
    m.cpuid = guest_cpuid;
    return m;
  }

  template <typename T>
  static std::vector<std::byte> archived(T& value) {
    pmu::StateWriter w;
    w(value);
    return w.take();
  }

  StateSections capture_state() override {
    StateSections s;
    VmArchState vm_state = vm->save_state(is_linux());
    s.add("vm.kvm", archived(vm_state));
    const std::vector<uint32_t> msrs = kvm->msrs_to_save();
    for (auto& vp : vcpus) {
      Vcpu& v = *vp;
      const std::string p = "vcpu" + std::to_string(v.kvm->index()) + ".";
      VcpuArchState arch = v.kvm->save_state(msrs);
      s.add(p + "kvm", archived(arch));
      s.add(p + "lwp", v.control->save_state());
      if (auto netburst = v.control->save_netburst_state()) s.add(p + "netburst", *netburst);
      pmu::StateWriter w;
      w(v, *v.limited);
      if (v.kvm_stepper) w(*v.kvm_stepper);
      if (v.stepper) w(*v.stepper);
      s.add(p + "vmm", w.take());
    }
    {
      std::lock_guard<std::mutex> g(serial_lock);
      pmu::StateWriter w;
      w(serial, rtc, console_line);
      s.add("devices", w.take());
    }
    {
      std::lock_guard<std::mutex> g(report_lock);
      pmu::StateWriter w;
      w(report, linux_tasks);
      s.add("report", w.take());
    }
    return s;
  }

  // Loads a snapshot's state into the freshly created VM, vCPUs and models (before any runs).
  // Throws UsageError naming the section that is missing or does not fit.
  void apply_state(const StateSections& s) {
    auto section = [&](const std::string& name) -> const std::vector<std::byte>& {
      const std::vector<std::byte>* bytes = s.find(name);
      if (!bytes) throw UsageError("the snapshot has no " + name + " state");
      return *bytes;
    };
    auto read = [&](const std::string& name, auto&&... values) {
      try {
        pmu::StateReader r(section(name));
        r(values...);
        r.expect_end();
      } catch (const pmu::StateFormatError& e) {
        throw UsageError("the snapshot's " + name + " state: " + e.what());
      }
    };
    VmArchState vm_state;
    read("vm.kvm", vm_state);
    if (is_linux() != vm_state.pit.has_value())
      throw UsageError("the snapshot's device state does not match its guest kind");
    for (auto& vp : vcpus) {
      Vcpu& v = *vp;
      const std::string p = "vcpu" + std::to_string(v.kvm->index()) + ".";
      VcpuArchState arch;
      read(p + "kvm", arch);
      v.kvm->restore_state(arch);
      v.kvm->load_exit_state();
      if (auto error = v.control->restore_state(section(p + "lwp")))
        throw UsageError("the snapshot's " + p + "lwp state: " + *error);
      if (auto error = v.control->restore_netburst_state(s.find(p + "netburst")))
        throw UsageError("the snapshot's " + p + "netburst state: " + *error);
      if (v.kvm_stepper && v.stepper) throw std::logic_error("two steppers");
      if (v.kvm_stepper) read(p + "vmm", v, *v.limited, *v.kvm_stepper);
      else if (v.stepper) read(p + "vmm", v, *v.limited, *v.stepper);
      else read(p + "vmm", v, *v.limited);
      v.debug_unknown = true;
    }
    vm->restore_state(vm_state);
    read("devices", serial, rtc, console_line);
    read("report", report, linux_tasks);
  }

  nlohmann::json describe() override {
    return {{"state", stop ? "ended" : "running"},
            {"config", {{"vcpus", options.vcpus},
                        {"mem_mib", options.mem_mib},
                        {"cpu", options.profile.name},
                        {"guest", is_linux() ? "linux" : "bundled"},
                        {"kernel", options.kernel_name},
                        {"seed", options.seed},
                        {"stepper", stepper_name(options.stepper)}}}};
  }

  nlohmann::json pmu_state() override {
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

  void shut_down() override {
    spdlog::info("vm.shutdown: the run ends (status 0)");
    finish(0);
  }

  void handed_over() override {
    migrated_away = true;
    finish(0);
  }

  void set_dirty_tracking(bool on) override {
    ram.set_write_tracking(on);
    vm->set_dirty_logging(on);
  }

  std::vector<uint64_t> take_dirty_pages() override {
    std::vector<uint64_t> pages = vm->take_dirty_pages();
    std::vector<uint64_t> vmm = ram.take_written_pages();
    pages.insert(pages.end(), vmm.begin(), vmm.end());
    std::sort(pages.begin(), pages.end());
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    return pages;
  }

  void create_vcpus(const LoadedGuest& guest) {
    const LongModeState boot = is_linux() ? setup_long_mode_for_linux(ram) : setup_long_mode(ram);
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
    for (uint32_t i = 0; i < options.vcpus; ++i) {
      auto v = std::make_unique<Vcpu>();
      v->kvm = std::make_unique<KvmVcpu>(*vm, i);
      v->kvm->set_cpuid(to_kvm(cpuid_for_vcpu(table, i)));  // APIC ID = the vCPU index
      if (options.restore) {
        // State comes from the snapshot (apply_state), boot registers not at all.
      } else if (is_linux()) {
        // Linux starts its application processors itself (INIT/SIPI through the in-kernel
        // LAPIC); until then they wait, as KVM leaves them.
        if (i == 0) v->kvm->enter_long_mode(boot, linux_boot.entry, 0, linux_boot.zero_page);
      } else {
        v->kvm->enter_long_mode(boot, guest.kernel_entry, guest.boot_info, i);
        if (i > 0) v->kvm->make_runnable();
      }
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
        v->stepper = std::make_unique<GuestAssistedStepper>(ram, to_cache_geometry(options.profile.cache));
      if (options.stepper == MachineOptions::Stepper::kKvm)
        // Linux's SYSCALL entry point is read from IA32_LSTAR once it has set it (update_stepping).
        v->kvm_stepper = std::make_unique<KvmStepper>(ram, to_cache_geometry(options.profile.cache),
                                                      is_linux() ? 0 : PMUVM_TRAMPOLINE_VA);
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

  int run() {
    if (!options.lwp_trace.empty()) {
      trace.open(options.lwp_trace);
      if (!trace) throw UsageError("cannot write LWP trace " + options.lwp_trace);
    }
    kvm = std::make_unique<KvmSystem>(options.kvm_device);
    vm = std::make_unique<KvmVm>(*kvm, ram);
    if (is_linux()) {
      vm->create_pit();  // Linux calibrates its TSC and LAPIC timer against it
      serial.set_irq_callback(
          [this](bool level) { vm->set_irq_line(Serial16550::kCom1Irq, level); });
    }
    create_vcpus(loaded);
    if (options.restore) {
      apply_state(options.restore->state);
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
    std::vector<std::thread> threads;
    for (auto& v : vcpus) threads.emplace_back([this, &v] { vcpu_loop(*v); });
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
    for (std::thread& t : threads) t.join();
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
      if (v->page_faults.delivered || v->page_faults.dropped)
        spdlog::info("vCPU {}: LWP #PF traps: {} delivered, {} dropped (raised by SYSCALL)",
                     v->kvm->index(), v->page_faults.delivered, v->page_faults.dropped);
    for (auto& v : vcpus)  // what stepping cost: steps per counted instruction (bench/, README)
      if (v->kvm_stepper)
        spdlog::info("vCPU {}: KVM stepper: {} CPL-3 and {} CPL-0 steps, {} returns to user mode "
                     "run to by breakpoint, {} CPL-3 instructions counted ({} unannounced "
                     "returns)", v->kvm->index(), v->kvm_stepper->user_steps(),
                     v->kvm_stepper->kernel_steps(), v->kvm_stepper->user_entries(), v->counted,
                     v->kvm_stepper->unannounced_returns());
      else if (v->stepper)
        spdlog::info("vCPU {}: guest-assisted stepper: {} CPL-3 and 0 CPL-0 steps, {} CPL-3 "
                     "instructions counted", v->kvm->index(), v->stepper->steps(), v->counted);
    if (!failure.empty()) throw VmmError(failure);
    return exit_status;
  }

  void write_report() {
    const std::string text = report.render();
    if (options.lwp_report == "-") {
      std::fputs(text.c_str(), stdout);
      return;
    }
    std::ofstream out(options.lwp_report);
    out << text;
    if (!out) spdlog::error("cannot write LWP report {}", options.lwp_report);
  }
};

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
  o.stepper = m.stepper == "kvm"     ? MachineOptions::Stepper::kKvm
              : m.stepper == "guest" ? MachineOptions::Stepper::kGuest
                                     : MachineOptions::Stepper::kNone;
  if (m.linux_guest) o.linux_guest.emplace();  // the run loop's Linux rules; nothing to load
  o.kernel_name = m.kernel;
  o.max_interrupts_per_second = m.max_interrupt_rate;
  return o;
}
Machine::~Machine() = default;
int Machine::run() { return impl_->run(); }

}  // namespace vmm
