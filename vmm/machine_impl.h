// Machine::Impl, the machine behind Machine's interface, and the per-vCPU helpers it is made of.
// Internal to //vmm:machine (not in machine.h): the state every part of the machine shares, with
// each member function declared next to the ones of its file:
//   machine.cc           building the VM and its vCPUs, the vCPU threads' run loop, the report
//   machine_exits.cc     what each KVM exit does: port I/O, MSR accesses, fatal exits
//   machine_stepping.cc  the KVM stepper: when to single-step, what each step retires
//   machine_state.cc     pausing, snapshots and migration; the API's view of the machine
#pragma once

#include <pthread.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pmu/rate_limited_interrupt_sink.h"
#include "vmm/cpu/cpuid_table.h"
#include "vmm/devices/guest_console.h"
#include "vmm/devices/io_bus.h"
#include "vmm/devices/lvt_performance_counter.h"
#include "vmm/devices/port_devices.h"
#include "vmm/host/free_run.h"
#include "vmm/host/host_counters.h"
#include "vmm/host/perf_host_counters.h"
#include "vmm/host/skidding_counter_double.h"
#include "vmm/kvm/exit_history.h"
#include "vmm/kvm/kvm_vcpu.h"
#include "vmm/log_budget.h"
#include "vmm/machine.h"
#include "vmm/machine/guest_kind.h"
#include "vmm/machine_control.h"
#include "vmm/precise/guest_assisted_stepper.h"
#include "vmm/precise/step_controller.h"
#include "vmm/progress_pauses.h"
#include "vmm/report/lwp_report.h"
#include "vmm/vcpu_control_block.h"
#include "vmm/vcpu_counts.h"
#include "vmm/vmm_error.h"

namespace vmm {

// IA32_MISC_ENABLE: a profile's value is written at boot (create_vcpus) and answers RDMSR
// (handle_msr).
constexpr uint32_t kMsrMiscEnable = 0x1A0;
// The longest the KVM stepper holds a vCPU's interrupts between user instructions before it lets
// them in (vmm/precise/step_controller.h): the guest's added interrupt latency. (Wall time: a
// stepped guest runs a few thousand instructions in it. Each look costs two ioctls; at 1 ms they
// made lwp_demo's stepped run 20 % slower than at 4 ms, in the nested host.) Interrupts the PMU
// models raise do not wait: their window opens after the instruction that raised them.
constexpr uint64_t kInterruptWindowNs = 4'000'000;
// The longest it holds them without a window when no interrupt seems to wait.
constexpr uint64_t kForcedWindowNs = 10'000'000;
// A vCPU holding interrupts is kicked when this long passed without a look at its window (see
// release_ticker): at most ~3 kInterruptWindowNs of held interrupts when it stops exiting.
constexpr uint64_t kHoldingWatchNs = 2 * kInterruptWindowNs;
// How often (in exits) a vCPU whose interrupts are held looks at the clock for the limits above:
// 16 exits are ~16 µs of stepping on bare metal, ~1 ms in the nested host.
constexpr uint32_t kExitsPerClockRead = 16;

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
  uint64_t sent = 0;  // interrupts and NMIs handed to KVM (the stepper opens a window for them)
  // PMIs the guest's LVTPC cannot take (a delivery mode other than fixed or NMI): the guest
  // decides how many, so a few are logged and the rest counted (told at the end of the run).
  LogBudget undeliverable_pmis{8};

  void deliver_vector(uint8_t vector) override {
    vm->signal_msi(apic_id, vector);
    ++sent;
  }
  void deliver_nmi() override {
    vcpu->nmi();
    ++sent;
  }
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
      case PmiDelivery::Route::kNmi: vcpu->nmi(), ++sent; break;
      case PmiDelivery::Route::kFixed: vm->signal_msi(apic_id, d.vector), ++sent; break;
      case PmiDelivery::Route::kUnsupported:
        if (const LogBudget::Verdict said = undeliverable_pmis.take();
            said != LogBudget::Verdict::kQuiet)
          spdlog::warn("vCPU {}: LVTPC delivery mode {} is not supported; PMI dropped{}",
                       vcpu->index(), d.delivery_mode, LogBudget::suffix(said));
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

// The vCPU's registers in one line (or why they cannot be read): a fatal exit's message, and
// where each vCPU was when a signal stopped the run.
inline std::string describe_registers(KvmVcpu& vcpu) {
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

struct Machine::Impl : MachineControl {
  MachineOptions options;
  GuestRam ram;
  std::unique_ptr<KvmSystem> kvm;
  std::unique_ptr<KvmVm> vm;
  SteadyClock clock;
  std::unique_ptr<GuestKind> guest_kind;  // bundled kernel or Linux (load_guest_kind)
  ProgressPauses progress;  // run --pause-on-output / --pause-at-instructions
  // The devices, on the port I/O bus (each locks its own state).
  GuestConsole console{progress, [this](std::string_view line) {
                         return guest_kind->panic_reason(line);
                       }};
  SerialPort serial{console};
  CmosPort cmos;
  ResetPort i8042;
  ExitPort exit_port;
  BlockConsolePort block_console{ram, console};
  IoBus io_bus;

  struct Vcpu {
    std::unique_ptr<KvmVcpu> kvm;
    VcpuInterrupts interrupts;
    VcpuPageFaults page_faults;
    std::unique_ptr<pmu::RateLimitedInterruptSink> limited;
    RequestTap tap;  // the PMU models' sink: reports, then hands over to `limited`
    std::unique_ptr<VcpuControlBlock> control;
    std::unique_ptr<GuestAssistedStepper> guest_stepper;  // precise backend, guest-assisted
    std::unique_ptr<StepController> kvm_stepper;          // precise backend, KVM stepper
    DebugConfig applied_debug;            // what KVM_SET_GUEST_DEBUG last got
    GuestDebugRegisters guest_debug;      // the guest's own DR0-3/DR7, as last read
    uint64_t counted = 0;   // CPL-3 instructions a stepper handed to the PMU models
    std::atomic<uint32_t> task{0};  // the guest task running here (PMUVM_MSR_TASK)
    // The vCPU's thread while it runs vcpu_loop (0 before and after), for kick(): set and
    // cleared by the thread itself under thread_lock, which kick() holds while it signals, so a
    // signal never goes to a thread that has ended (or been joined, or whose id was reused).
    pthread_t thread = 0;
    std::mutex thread_lock;
    // Steady-clock time at which interrupts held by the rate limiter can go out (0 = none held).
    // Published by the vCPU thread after every exit; the release ticker kicks the vCPU then, since
    // a guest halted inside KVM (in-kernel LAPIC) makes no exit that would poll the limiter.
    std::atomic<uint64_t> release_at_ns{0};
    // Since when the KVM stepper holds this vCPU's interrupts without a window or a look for
    // pending ones (0: it does not; published by the vCPU thread, read by the release ticker,
    // which kicks a vCPU that has made no exit for that long).
    std::atomic<uint64_t> holding_since_ns{0};
    uint64_t last_window_ns = 0;  // when the KVM stepper last opened an interrupt window
    uint32_t exits_without_clock = 0;  // interrupt_window: exits since it last read the clock
    bool window_owed = false;  // an interrupt was raised while held: a window at the first chance
    // The last exit was an I/O port or MSR access: KVM finishes it (the IN's data, RDMSR's
    // result, RIP past it) only in the next KVM_RUN, so the vCPU cannot be parked for a snapshot
    // before one more KVM_RUN (with immediate_exit: nothing else runs).
    bool needs_completion = false;
    // Restored from a snapshot: KVM holds none of the guest-debug state `applied_debug`
    // describes, so update_stepping issues it once whatever it says.
    bool debug_unknown = false;
    ExitHistory exits;  // the last exits, told when the guest dies (registers lost on AMD)
    LogBudget mmio_warnings{8};  // MMIO accesses where no device is: logged 8 times, then counted
    LogBudget dropped_debug_warnings{8};  // the guest's own #DBs that met a pending exception
    uint64_t exit_count = 0;  // KVM exits in this process (--stats)
    uint64_t debug_exits = 0;  // ... of them KVM_EXIT_DEBUG (the KVM stepper's stops)
    uint64_t io_exits = 0;     // ... port I/O and MMIO
    uint64_t msr_exits = 0;    // ... RDMSR/WRMSR

    // --backend host (DESIGN §4.11; machine_host_backend.cc).
    std::unique_ptr<HostCounters> host_counters;
    SkiddingCounterDouble* counter_double = nullptr;  // host_counters, when it is the double
    std::optional<FreeRun> free_run;  // armed: the guest runs unseen while the counters count
    bool host_fell_back = false;  // an overflow came past the skid margin: stepped from then on
    struct HostStats {
      uint64_t free_runs = 0;
      uint64_t overflow_ends = 0;  // free runs ended by their counters' overflow
      uint64_t unseen_instructions = 0;  // CPL-3 instructions the models took in batches
      uint64_t steps_while_free = 0;  // the double's debug exits inside free runs (a host PMU
                                      // would not have them)
      uint64_t overshoots = 0;
    } host_stats;

    // Snapshot / migration of the bookkeeping above (the models have their own archives), in
    // the format of VcpuCounts.
    VcpuCounts counts() const {
      return {counted, task, interrupts.pmi_pending, page_faults.delivered, page_faults.dropped};
    }
    void set_counts(const VcpuCounts& c) {
      counted = c.counted;
      task = c.task;
      interrupts.pmi_pending = c.pmi_pending;
      page_faults.delivered = c.page_faults_delivered;
      page_faults.dropped = c.page_faults_dropped;
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
  bool progress_paused = false;  // paused itself there; the API takes it as the user's pause
  std::vector<CpuidEntry> guest_cpuid;  // the table the guest sees (before per-vCPU APIC IDs)
  std::mutex stop_lock;  // with stop_signal: wakes the release ticker at the end of the run
  std::condition_variable stop_signal;
  std::atomic<int> exit_status{0};
  std::mutex failure_lock;
  std::string failure;  // a VMM failure ends the run with status 3

  std::mutex report_lock;
  LwpReport report;
  std::map<uint64_t, uint32_t> linux_tasks;  // CR3 -> report task number (Linux guests)

  std::ofstream trace;

  // Asked once: spdlog's level check goes through its registry, a visible cost at every step.
  const bool trace_steps = spdlog::should_log(spdlog::level::trace);

  // ---- Building and running the VM (machine.cc) -----------------------------------------------

  explicit Impl(MachineOptions o);
  uint32_t pv_features() const;

  void fail(const std::string& reason);

  // A counting backend handed one CPL-3 instruction of vCPU `v` to its PMU models.
  void count_instruction(Vcpu& v) {
    ++v.counted;
    if (auto reason = progress.on_counted_instruction()) pause_at_progress(*reason);
  }
  void count_instructions(Vcpu& v, uint64_t n) {
    v.counted += n;
    if (auto reason = progress.on_counted_instructions(n)) pause_at_progress(*reason);
  }
  void finish(int status);

  // Makes the vCPU leave (or not enter) KVM_RUN: immediate_exit covers a thread that is about to
  // enter, the signal one that is inside. The vCPU thread clears immediate_exit after each return
  // and only then looks at what it was kicked for, so no kick is lost.
  static void kick(Vcpu& v);

  void interrupted_by(int sig);
  int interrupted_signal = 0;

  // Wakes each vCPU when interrupts its rate limiter held may go out (storm protection must
  // delay interrupts, never lose or strand them).
  void release_ticker();

  // --debug-pause-every: vCPU 0 counts its exits and wakes `debug_pauser`, which pauses and
  // resumes the whole VM from outside, as the API does.
  std::mutex debug_pause_lock;
  std::condition_variable debug_pause_due;
  uint64_t debug_pauses_owed = 0;
  uint64_t debug_exits = 0;  // vCPU 0's thread only
  uint64_t debug_pauses = 0;
  void debug_pauser();

  void vcpu_loop(Vcpu& v);
  void create_vcpus();

  int run();
  void set_up_kvm();
  void write_report();
  void count_exit(Vcpu& v, uint32_t reason);  // --stats: exits by kind
  // --stats: exits and single steps of this process, instructions counted since the boot.
  void print_stats();

  // ---- KVM exits (machine_exits.cc) -----------------------------------------------------------

  // The vCPU's RDMSR / WRMSR (ExitContext): nullopt / false for a #GP.
  std::optional<uint64_t> read_msr(Vcpu& v, uint32_t msr);
  bool write_msr(Vcpu& v, uint32_t msr, uint64_t value);
  uint32_t linux_task(uint64_t cr3);

  // Handles the exit (vmm/machine/exit_handler.h) and acts on what it asks; false when the vCPU
  // must stop.
  bool dispatch(Vcpu& v);
  class VcpuExitContext;  // the vCPU as the exit handler sees it

  // ---- The KVM stepper (machine_stepping.cc) --------------------------------------------------

  // What counts on this vCPU now (DESIGN §4.7): nothing, user code only (LWP; NetBurst without
  // T0_OS), or every CPL (a NetBurst counter with T0_OS).
  static StepScope step_scope(const Vcpu& v);
  // How many instructions may retire before the PMU models (or a --pause-at-instructions point)
  // show something: the longest block the stepper may run now.
  uint64_t quiet_retirements(Vcpu& v);
  // Before each KVM_RUN: the step controller's scope and the KVM debug configuration it wants.
  void update_stepping(Vcpu& v);
  // One KVM_EXIT_DEBUG.
  void on_step(Vcpu& v);
  // Any other exit (nothing retired; where the vCPU is may still tell the stepper something).
  void other_exit(Vcpu& v);
  // KVM_RUN returned without an exit (EINTR: a kick).
  void kicked(Vcpu& v);
  // After an exit: opens an interrupt window when the PMU models just raised an interrupt
  // (`raised`) or interrupts have been held for kInterruptWindowNs (StepController's header).
  void interrupt_window(Vcpu& v, bool raised, bool kicked);

  // Hands retirements to the PMU models. The exit is the boundary after the last one: at CPL 0
  // that instruction was a SYSCALL or INT n reported at its kernel entry, whose user #PF cannot
  // be delivered in the kernel; nor can one of an earlier instruction of the same report.
  void retire_all(Vcpu& v, const RetiredInstructions& retired, uint8_t cpl,
                  uint64_t cr3);

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

  // ---- The host backend (machine_host_backend.cc) ---------------------------------------------

  // Before a KVM_RUN: lets the vCPU run unseen up to the skid margin before the models' next
  // boundary, when they allow it (FreeRun), and arms its host counters.
  void arm_free_run(Vcpu& v);
  // The free run ends (a kick, an exit, the double's overflow, a pause): what the counters
  // counted goes to the models as one batch, before anything else can change their state.
  void end_free_run(Vcpu& v);
  // The counters' overflow came past the margin: the instructions past the boundary retire
  // late, at the vCPU's RIP now, and the vCPU is stepped from then on.
  void retire_past_boundary(Vcpu& v, const pmu::UnseenRetirements& past);
  // The vCPU runs unseen by the KVM stepper too (host PMU counters, not the double).
  static bool running_unseen(const Vcpu& v) { return v.free_run && !v.counter_double; }

  // ---- Pausing, snapshots and migration (MigratableVm; machine_state.cc) ----------------------

  // The vCPU thread waits here while a pause is requested (or until the run ends).
  void park();

  bool pause() override;
  void resume() override;
  // A progress point was reached (ProgressPauses): every vCPU parks at its next boundary, as for
  // vm.pause, and stays there until vm.resume. Called on a vCPU thread, which parks too.
  void pause_at_progress(const std::string& reason);
  bool take_progress_pause() override;
  GuestRam& guest_ram() override { return ram; }
  SnapshotManifest manifest() override;

  template <typename T>
  static std::vector<std::byte> archived(T& value);
  StateSections capture_state() override;

  // Loads a snapshot's state into the freshly created VM, vCPUs and models (before any runs).
  // Throws UsageError naming the section that is missing or does not fit.
  void apply_state(const StateSections& s);

  nlohmann::json describe() override;
  nlohmann::json pmu_state() override;
  void shut_down() override;
  void handed_over() override;
  void set_dirty_tracking(bool on) override;
  std::vector<uint64_t> take_dirty_pages() override;
};

}  // namespace vmm
