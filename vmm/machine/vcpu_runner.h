// One vCPU, run by its own thread: its KvmVcpu, its PMU models (VcpuPmu), the interrupt
// path out of them, its counting backend (the KVM stepper or the guest-assisted one, and the
// host backend's counters) and its statistics. run() is the thread's loop around KVM_RUN: each
// exit goes through the exit handler (vmm/machine/exit_handler.h) and the stepper; what concerns
// the whole VM (ending the run, pausing, the devices, the report) goes through VcpuHost.
//
// Threads: everything here belongs to the vCPU's thread, except kick(), the release ticker's
// atomics (release_at_ns, holding_since_ns) and what the machine reads while every vCPU is
// parked (save_state, pmu_state, the closing figures after the thread ended).
#pragma once

#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pmu/rate_limited_interrupt_sink.h"
#include "vmm/cpu/cpuid_table.h"
#include "vmm/host/free_run.h"
#include "vmm/host/host_counters.h"
#include "vmm/host/skidding_counter_double.h"
#include "vmm/kvm/exit_history.h"
#include "vmm/kvm/kvm_vcpu.h"
#include "vmm/log_budget.h"
#include "vmm/machine/vcpu_host.h"
#include "vmm/machine/machine_sections.h"
#include "vmm/machine/vcpu_interrupts.h"
#include "vmm/precise/guest_assisted_stepper.h"
#include "vmm/precise/step_controller.h"
#include "vmm/snapshot/state_sections.h"
#include "vmm/vpmu/vcpu_pmu.h"
#include "vmm/vcpu_counts.h"

namespace vmm {

// The longest the KVM stepper holds a vCPU's interrupts between user instructions before it lets
// them in (vmm/precise/step_controller.h): the guest's added interrupt latency. (Wall time: a
// stepped guest runs a few thousand instructions in it. Each look costs two ioctls; at 1 ms they
// made lwp_demo's stepped run 20 % slower than at 4 ms, in the nested host.) Interrupts the PMU
// models raise do not wait: their window opens after the instruction that raised them.
constexpr uint64_t kInterruptWindowNs = 4'000'000;
// The longest it holds them without a window when no interrupt seems to wait.
constexpr uint64_t kForcedWindowNs = 10'000'000;
// A vCPU holding interrupts is kicked when this long passed without a look at its window (see
// Machine's release ticker): at most ~3 kInterruptWindowNs of held interrupts when it stops
// exiting.
constexpr uint64_t kHoldingWatchNs = 2 * kInterruptWindowNs;
// How often (in exits) a vCPU whose interrupts are held looks at the clock for the limits above:
// 16 exits are ~16 µs of stepping on bare metal, ~1 ms in the nested host.
constexpr uint32_t kExitsPerClockRead = 16;
// IA32_MISC_ENABLE: a profile's value is written at boot and answers RDMSR.
constexpr uint32_t kMsrMiscEnable = 0x1A0;
// The signal that kicks a vCPU thread out of KVM_RUN (and the host counters' overflow signal).
constexpr int kKickSignal = SIGUSR1;

class VcpuRunner {
 public:
  // Creates vCPU `index` of `vm` with the guest's CPUID (`cpuid`, before per-vCPU APIC IDs) and
  // its PMU models and counting backend as the host's options say. `netburst`: the profile's
  // NetBurst PMU, if it has one.
  VcpuRunner(VcpuHost& host, KvmVm& vm, GuestRam& ram, uint32_t index,
             const std::vector<CpuidEntry>& cpuid,
             const std::optional<pmu::netburst::Config>& netburst);
  VcpuRunner(const VcpuRunner&) = delete;
  VcpuRunner& operator=(const VcpuRunner&) = delete;

  uint32_t index() const { return kvm_->index(); }
  KvmVcpu& kvm() { return *kvm_; }
  VcpuPmu& pmu() { return *pmu_; }
  // The guest task running here (PMUVM_MSR_TASK, or by address space).
  uint32_t task() const { return task_; }
  // CPL-3 instructions a counting backend handed to the PMU models.
  uint64_t counted() const { return counted_; }
  // The same and the KVM exits, as another thread may read them while the vCPU runs (the
  // progress line): copies the vCPU thread stores after each exit.
  uint64_t counted_now() const { return counted_seen_.load(std::memory_order_relaxed); }
  uint64_t exits_now() const { return exits_seen_.load(std::memory_order_relaxed); }
  // Every threshold vector the models raise, with whether the rate limiter coalesced it.
  void on_threshold_interrupt(std::function<void(bool coalesced)> hook) {
    tap_.on_vector = std::move(hook);
  }

  // The vCPU thread's loop: runs until the run ends. Errors end the run (VcpuHost::fail).
  void run();
  // Makes the vCPU leave (or not enter) KVM_RUN: immediate_exit covers a thread that is about to
  // enter, the signal one that is inside. The vCPU thread clears immediate_exit after each return
  // and only then looks at what it was kicked for, so no kick is lost. Any thread.
  void kick();

  // For the release ticker (any thread): when interrupts the rate limiter holds may go out (0:
  // none held), and since when the KVM stepper holds the guest's interrupts (0: it does not).
  std::atomic<uint64_t>& release_at_ns() { return release_at_ns_; }
  uint64_t holding_since_ns() const { return holding_since_ns_.load(); }

  // Snapshot / migration of this vCPU: its KVM state, models, counts, rate limiter and stepper as
  // sections "vcpuN.*" (vmm/machine/machine_sections.h). save_state runs on the vCPU's own thread
  // while it is parked (VmLifecycle::on_each_vcpu). A restore, before the thread starts, first
  // loads every section (load_state: UsageError naming a section that is missing or does not
  // fit) and returns the KVM state, which apply_kvm_state then hands to KVM.
  void save_state(StateSections& s, const std::vector<uint32_t>& msrs);
  VcpuArchState load_state(const StateSections& s);
  void apply_kvm_state(const VcpuArchState& arch, const std::vector<uint32_t>& msrs);
  // vm.pmu: LWP and NetBurst state and the counted instructions (parked).
  nlohmann::json pmu_state();

  // After the run: what the rate limiter held back, and what else happened on this vCPU (PMIs
  // dropped, #PF traps, stepping, the host backend), in the log; --stats's lines on stderr.
  void log_rate_limit() const;
  void log_closing_lines() const;
  void print_stats() const;

 private:
  friend class VcpuExits;  // the vCPU as the exit handler sees it (vcpu_exits.cc)

  // This vCPU's objects as its state sections name them, with `arch` and `counts` standing in
  // for the KVM state and the counts kept in several places here.
  VcpuParts state_parts(VcpuArchState& arch, VcpuCounts& counts);

  // A counting backend handed CPL-3 instructions to the PMU models.
  void count_instruction();
  void count_instructions(uint64_t n);

  // One exit, in the loop: counted, ended free run, stepper told, interrupts polled, handled.
  // False when the vCPU must stop.
  bool after_run(int r);
  void count_exit(uint32_t reason);  // --stats: exits by kind
  bool dispatch();                   // the exit handler, and what its action asks

  // ---- MSRs (vcpu_exits.cc) -------------------------------------------------------------------
  std::optional<uint64_t> read_msr(uint32_t msr);
  bool write_msr(uint32_t msr, uint64_t value);

  // ---- The KVM stepper (vcpu_stepping.cc) -----------------------------------------------------
  // What counts on this vCPU now (DESIGN §4.7): nothing, user code only (LWP; NetBurst without
  // T0_OS), or every CPL (a NetBurst counter with T0_OS).
  StepScope step_scope() const;
  // How many instructions may retire before the PMU models (or a --pause-at-instructions point)
  // show something: the longest block the stepper may run now.
  uint64_t quiet_retirements();
  // Before each KVM_RUN: the step controller's scope and the KVM debug configuration it wants.
  void update_stepping();
  // One KVM_EXIT_DEBUG.
  void on_step();
  // Any other exit (nothing retired; where the vCPU is may still tell the stepper something).
  void other_exit();
  // KVM_RUN returned without an exit (EINTR: a kick).
  void kicked();
  // After an exit: opens an interrupt window when the PMU models just raised an interrupt
  // (`raised`) or interrupts have been held for kInterruptWindowNs (StepController's header).
  void interrupt_window(bool raised, bool kicked);
  // Hands retirements to the PMU models. The exit is the boundary after the last one: at CPL 0
  // that instruction was a SYSCALL or INT n reported at its kernel entry, whose user #PF cannot
  // be delivered in the kernel; nor can one of an earlier instruction of the same report.
  void retire_all(const RetiredInstructions& retired, uint8_t cpl, uint64_t cr3);

  // Delivers the #PF trap the LWP unit raised while retiring the instruction just handed to it, if
  // any, with `deliver` (false: it cannot be delivered at this boundary). An undelivered trap is
  // harmless: LWP's state did not change, so the next occurrence of the event raises it again.
  template <typename Deliver>
  void deliver_page_fault(Deliver deliver) {
    const std::optional<VcpuPageFaults::Fault> f =
        std::exchange(page_faults_.pending, std::nullopt);
    if (!f) return;
    const bool delivered = deliver(*f);
    ++(delivered ? page_faults_.delivered : page_faults_.dropped);
    spdlog::debug("vCPU {}: LWP #PF trap at {:#x}, error {:#x}: {}", index(), f->linear,
                  f->error_code, delivered ? "delivered" : "not deliverable here, dropped");
  }

  // ---- The host backend (vcpu_host_backend.cc) ------------------------------------------------
  // Before a KVM_RUN: lets the vCPU run unseen up to the skid margin before the models' next
  // boundary, when they allow it (FreeRun), and arms its host counters.
  void arm_free_run();
  // The free run ends (a kick, an exit, the double's overflow, a pause): what the counters
  // counted goes to the models as one batch, before anything else can change their state.
  void end_free_run();
  // The counters' overflow came past the margin: the instructions past the boundary retire
  // late, at the vCPU's RIP now, and the vCPU is stepped from then on.
  void retire_past_boundary(const pmu::UnseenRetirements& past);
  // The vCPU runs unseen by the KVM stepper too (host PMU counters, not the double).
  bool running_unseen() const { return free_run_ && !counter_double_; }

  VcpuHost& host_;
  GuestRam& ram_;
  std::unique_ptr<KvmVcpu> kvm_;
  VcpuInterrupts interrupts_;
  VcpuPageFaults page_faults_;
  std::unique_ptr<pmu::RateLimitedInterruptSink> limited_;
  RequestTap tap_;  // the PMU models' sink: reports, then hands over to `limited_`
  std::unique_ptr<VcpuPmu> pmu_;
  std::unique_ptr<GuestAssistedStepper> guest_stepper_;  // precise backend, guest-assisted
  std::unique_ptr<StepController> kvm_stepper_;          // precise backend, KVM stepper
  DebugConfig applied_debug_;                            // what KVM_SET_GUEST_DEBUG last got
  GuestDebugRegisters guest_debug_;                      // the guest's own DR0-3/DR7, as last read
  uint64_t counted_ = 0;
  std::atomic<uint32_t> task_{0};
  // The vCPU's thread while it runs run() (0 before and after), for kick(): set and cleared by
  // the thread itself under thread_lock_, which kick() holds while it signals, so a signal never
  // goes to a thread that has ended (or been joined, or whose id was reused).
  pthread_t thread_ = 0;
  std::mutex thread_lock_;
  // Steady-clock time at which interrupts held by the rate limiter can go out (0 = none held).
  // Published by the vCPU thread after every exit; the release ticker kicks the vCPU then, since
  // a guest halted inside KVM (in-kernel LAPIC) makes no exit that would poll the limiter.
  std::atomic<uint64_t> release_at_ns_{0};
  // Since when the KVM stepper holds this vCPU's interrupts without a window or a look for
  // pending ones (0: it does not; published by the vCPU thread, read by the release ticker,
  // which kicks a vCPU that has made no exit for that long).
  std::atomic<uint64_t> holding_since_ns_{0};
  uint64_t last_window_ns_ = 0;       // when the KVM stepper last opened an interrupt window
  uint32_t exits_without_clock_ = 0;  // interrupt_window: exits since it last read the clock
  bool window_owed_ = false;  // an interrupt was raised while held: a window at the first chance
  // The last exit was an I/O port or MSR access: KVM finishes it (the IN's data, RDMSR's
  // result, RIP past it) only in the next KVM_RUN, so the vCPU cannot be parked for a snapshot
  // before one more KVM_RUN (with immediate_exit: nothing else runs).
  bool needs_completion_ = false;
  // Restored from a snapshot: KVM holds none of the guest-debug state `applied_debug_`
  // describes, so update_stepping issues it once whatever it says.
  bool debug_unknown_ = false;
  ExitHistory exits_;           // the last exits, told when the guest dies (registers lost on AMD)
  LogBudget mmio_warnings_{8};  // MMIO accesses where no device is: logged 8 times, then counted
  LogBudget dropped_debug_warnings_{8};  // the guest's own #DBs that met a pending exception
  uint64_t exit_count_ = 0;              // KVM exits in this process (--stats)
  uint64_t debug_exits_ = 0;             // ... of them KVM_EXIT_DEBUG (the KVM stepper's stops)
  uint64_t io_exits_ = 0;                // ... port I/O and MMIO
  uint64_t msr_exits_ = 0;               // ... RDMSR/WRMSR
  std::atomic<uint64_t> counted_seen_{0}, exits_seen_{0};  // counted_now(), exits_now()
  // Asked once: spdlog's level check goes through its registry, a visible cost at every step.
  const bool trace_steps_ = spdlog::should_log(spdlog::level::trace);

  // --backend host (DESIGN §4.11; vcpu_host_backend.cc).
  std::unique_ptr<HostCounters> host_counters_;
  SkiddingCounterDouble* counter_double_ = nullptr;  // host_counters_, when it is the double
  std::optional<FreeRun> free_run_;  // armed: the guest runs unseen while the counters count
  bool host_fell_back_ = false;      // an overflow came past the skid margin: stepped from then on
  struct HostStats {
    uint64_t free_runs = 0;
    uint64_t overflow_ends = 0;        // free runs ended by their counters' overflow
    uint64_t unseen_instructions = 0;  // CPL-3 instructions the models took in batches
    uint64_t steps_while_free = 0;     // the double's debug exits inside free runs (a host PMU
                                       // would not have them)
    uint64_t overshoots = 0;
  } host_stats_;
};

}  // namespace vmm
