// One vCPU, run by its own thread: its KvmVcpu, its PMU models (VcpuPmu), the interrupt
// path out of them, its counting backend (vmm/counting/counting_backend.h, whichever it is) and
// its statistics. run() is the thread's loop around KVM_RUN: each exit goes through the counting
// backend and the exit handler (vmm/machine/exit_handler.h); what concerns the whole VM (ending
// the run, pausing, the devices, the report) goes through VcpuHost.
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
#include "vmm/counting/counting_backend.h"
#include "vmm/cpu/cpuid_table.h"
#include "vmm/kvm/exit_history.h"
#include "vmm/kvm/kvm_vcpu.h"
#include "vmm/log_budget.h"
#include "vmm/machine/machine_sections.h"
#include "vmm/machine/vcpu_counts.h"
#include "vmm/machine/vcpu_host.h"
#include "vmm/machine/vcpu_interrupts.h"
#include "vmm/snapshot/state_sections.h"
#include "vmm/vpmu/lwp_page_faults.h"
#include "vmm/vpmu/vcpu_pmu.h"

namespace vmm {

// IA32_MISC_ENABLE: a profile's value is written at boot and answers RDMSR.
constexpr uint32_t kMsrMiscEnable = 0x1A0;
// IA32_DEBUGCTL: trapped under pmuvm's architectural PMU, whose freeze bits it holds.
constexpr uint32_t kMsrDebugctl = 0x1D9;
// The signal that kicks a vCPU thread out of KVM_RUN (and the host counters' overflow signal).
constexpr int kKickSignal = SIGUSR1;

class VcpuRunner : private CountedVcpu {
 public:
  // Creates vCPU `index` of `vm` with the host's guest CPU (its CPUID, with this vCPU's APIC ID,
  // and its PMU models) and the counting backend the host's options choose.
  VcpuRunner(VcpuHost& host, KvmVm& vm, GuestRam& ram, uint32_t index);
  VcpuRunner(const VcpuRunner&) = delete;
  VcpuRunner& operator=(const VcpuRunner&) = delete;

  uint32_t index() const override { return kvm_->index(); }
  KvmVcpu& kvm() override { return *kvm_; }
  VcpuPmu& pmu() override { return *pmu_; }
  // The guest task running here (PMUVM_MSR_TASK, or by address space).
  uint32_t task() const { return task_; }
  // CPL-3 instructions a counting backend handed to the PMU models.
  uint64_t counted() const override { return counted_; }
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
  // none held), and since when its counting backend holds the guest's interrupts (0: it does not).
  std::atomic<uint64_t>& release_at_ns() { return release_at_ns_; }
  uint64_t holding_since_ns() const { return backend_->holding_since_ns(); }

  // Snapshot / migration of this vCPU: its KVM state, models, counts, rate limiter and counting
  // backend as sections "vcpuN.*" (vmm/machine/machine_sections.h). save_state runs on the vCPU's
  // own thread while it is parked (VmLifecycle::on_each_vcpu). A restore, before the thread starts,
  // first loads every section (load_state: UsageError naming a section that is missing or does not
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

  // CountedVcpu: the vCPU as its counting backend sees it.
  LwpPageFaults& page_faults() override { return page_faults_; }
  pmu::Clock& clock() override { return host_.clock(); }
  void add_counted(uint64_t n) override;
  // The registers and TSC a PEBS record holds: the vCPU's at the exit whose retirements the
  // backend is reporting.
  pmu::arch_perfmon::PebsRegisters pebs_registers();
  std::optional<uint64_t> instructions_to_pause() override {
    return host_.progress().instructions_to_pause();
  }

  // One exit, in the loop: counted, the backend told, interrupts polled, handled. False when the
  // vCPU must stop.
  bool after_run(int r);
  bool dispatch();  // the exit handler, and what its action asks

  // ---- MSRs (vcpu_exits.cc) -------------------------------------------------------------------
  std::optional<uint64_t> read_msr(uint32_t msr);
  bool write_msr(uint32_t msr, uint64_t value);

  VcpuHost& host_;
  std::unique_ptr<KvmVcpu> kvm_;
  VcpuInterrupts interrupts_;
  LwpPageFaults page_faults_;
  std::unique_ptr<pmu::RateLimitedInterruptSink> limited_;
  RequestTap tap_;  // the PMU models' sink: reports, then hands over to `limited_`
  std::unique_ptr<VcpuPmu> pmu_;
  std::unique_ptr<CountingBackend> backend_;
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
  // The last exit was an I/O port or MSR access: KVM finishes it (the IN's data, RDMSR's
  // result, RIP past it) only in the next KVM_RUN, so the vCPU cannot be parked for a snapshot
  // before one more KVM_RUN (with immediate_exit: nothing else runs).
  bool needs_completion_ = false;
  ExitHistory exits_;           // the last exits, told when the guest dies (registers lost on AMD)
  LogBudget mmio_warnings_{8};  // MMIO accesses where no device is: logged 8 times, then counted
  ExitTally exit_tally_;        // KVM exits in this process, by kind (--stats)
  std::atomic<uint64_t> counted_seen_{0}, exits_seen_{0};  // counted_now(), exits_now()
};

}  // namespace vmm
