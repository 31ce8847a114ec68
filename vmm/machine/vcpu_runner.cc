#include "vmm/machine/vcpu_runner.h"

#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <exception>
#include <string>

#include "pmu/state_archive.h"
#include "vmm/cpu/cache_model_geometry.h"
#include "vmm/host/perf_host_counters.h"

namespace vmm {
namespace {

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

VcpuRunner::VcpuRunner(VcpuHost& host, KvmVm& vm, GuestRam& ram, uint32_t index,
                       const std::vector<CpuidEntry>& cpuid,
                       const std::optional<pmu::netburst::Config>& netburst)
    : host_(host), ram_(ram), kvm_(std::make_unique<KvmVcpu>(vm, index)) {
  const MachineOptions& options = host.options();
  kvm_->set_cpuid(to_kvm(cpuid_for_vcpu(cpuid, index)));  // APIC ID = the vCPU index
  interrupts_.vm = &vm;
  interrupts_.vcpu = kvm_.get();
  interrupts_.apic_id = index;
  limited_ = std::make_unique<pmu::RateLimitedInterruptSink>(interrupts_, host.clock(),
                                                             options.max_interrupts_per_second);
  tap_.limited = limited_.get();
  pmu_ = std::make_unique<VcpuPmu>(index, index, options.profile.lwp, options.seed, ram, tap_,
                                   netburst, &page_faults_);
  const pmu::cache::Geometry cache = cache_model_geometry(options.profile.cache);
  if (options.stepper == StepperKind::kGuest)
    guest_stepper_ = std::make_unique<GuestAssistedStepper>(ram, cache);
  if (options.stepper == StepperKind::kKvm || options.stepper == StepperKind::kKvmSingle)
    kvm_stepper_ = std::make_unique<StepController>(
        ram, cache,
        StepController::Options{.trap_flag_steps = options.vcpus == 1,
                                .block_steps = options.stepper == StepperKind::kKvm});
  if (options.host_backend && options.host_backend->counter_double) {
    auto counters = std::make_unique<SkiddingCounterDouble>(options.host_backend->double_skid);
    counter_double_ = counters.get();
    host_counters_ = std::move(counters);
  } else if (options.host_backend) {
    host_counters_ = std::make_unique<PerfHostCounters>(kKickSignal);
  }
  // The cache model sees the accesses of instructions that retire while an enabled event can
  // use them: a VM that profiles only instructions and branches leaves it empty (issue 21).
  auto demand = [pmu = pmu_.get()] {
    return StepAccountant::ModelDemand{pmu->uses_cache_model(), pmu->uses_branch_predictor()};
  };
  if (guest_stepper_) guest_stepper_->set_model_demand(demand);
  if (kvm_stepper_) kvm_stepper_->set_model_demand(demand);
}

void VcpuRunner::count_instruction() {
  ++counted_;
  if (auto reason = host_.progress().on_counted_instruction()) host_.pause_at_progress(*reason);
}

void VcpuRunner::count_instructions(uint64_t n) {
  counted_ += n;
  if (auto reason = host_.progress().on_counted_instructions(n)) host_.pause_at_progress(*reason);
}

void VcpuRunner::kick() {
  kvm_->run_state()->immediate_exit = 1;
  std::lock_guard<std::mutex> g(thread_lock_);
  if (thread_) pthread_kill(thread_, kKickSignal);
}

void VcpuRunner::run() {
  {
    std::lock_guard<std::mutex> g(thread_lock_);
    thread_ = pthread_self();
  }
  struct Unregister {  // on every way out: kick() must not signal this thread once it is gone
    VcpuRunner& v;
    ~Unregister() {
      std::lock_guard<std::mutex> g(v.thread_lock_);
      v.thread_ = 0;
    }
  } unregister{*this};
  try {
    while (!host_.stopping()) {
      const bool pausing = host_.pause_requested();
      if (pausing && !needs_completion_) {
        end_free_run();  // a snapshot saves the models with everything counted
        host_.park(index());
        continue;
      }
      // A vCPU on its way to being parked only completes its last exit (immediate_exit: no
      // guest instruction runs), so its stepping state is left as it is.
      if (!pausing) arm_free_run();
      if (kvm_stepper_ && !pausing) update_stepping();
      if (pausing) kvm_->run_state()->immediate_exit = 1;
      const int r = kvm_->run();
      kvm_->run_state()->immediate_exit = 0;  // before looking at why: see kick()
      if (!after_run(r)) break;
    }
    end_free_run();  // the run ended (another vCPU's exit): the report counts everything
  } catch (const std::exception& e) {
    host_.fail(e.what());
  }
}

bool VcpuRunner::after_run(int r) {
  // Any KVM_RUN, even one that returns EINTR at once, completes the previous exit's access.
  const uint32_t reason = kvm_->run_state()->exit_reason;
  needs_completion_ = r >= 0 && (reason == KVM_EXIT_IO || reason == KVM_EXIT_MMIO ||
                                 reason == KVM_EXIT_X86_RDMSR || reason == KVM_EXIT_X86_WRMSR);
  if (r >= 0) {
    exits_.record(*kvm_->run_state());
    ++exit_count_;
    exits_seen_.store(exit_count_, std::memory_order_relaxed);
    counted_seen_.store(counted_, std::memory_order_relaxed);
    count_exit(reason);
    host_.exit_taken(index());
  }
  // The host backend: the exit ends a free run before it is handled (it may change what the
  // models count). The double's steps continue it: what they retire goes to the double.
  if (free_run_) {
    if (counter_double_ && r >= 0 && reason == KVM_EXIT_DEBUG)
      ++host_stats_.steps_while_free;
    else
      end_free_run();
  }
  // A kick (r < 0) stops the vCPU between instructions: nothing retired.
  if (kvm_stepper_) {
    if (r < 0)
      kicked();
    else if (reason != KVM_EXIT_DEBUG)
      other_exit();
  }
  const uint64_t sent = interrupts_.sent;
  limited_->poll();                   // storm protection: release held interrupts when allowed
  interrupts_.deliver_pending_pmi();  // a PMI waiting for the guest to unmask LVTPC
  if (r >= 0 && !dispatch()) return false;  // r < 0: EINTR/EAGAIN, a kick; re-check stop
  if (kvm_stepper_) interrupt_window(interrupts_.sent != sent, r < 0);
  release_at_ns_ = limited_->next_release_ns().value_or(0);
  return true;
}

void VcpuRunner::count_exit(uint32_t reason) {
  switch (reason) {
    case KVM_EXIT_DEBUG: ++debug_exits_; break;
    case KVM_EXIT_IO:
    case KVM_EXIT_MMIO: ++io_exits_; break;
    case KVM_EXIT_X86_RDMSR:
    case KVM_EXIT_X86_WRMSR: ++msr_exits_; break;
    default: break;
  }
}

VcpuParts VcpuRunner::state_parts(VcpuArchState& arch, VcpuCounts& counts) {
  return VcpuParts{
      index(), arch, *pmu_, counts, *limited_, kvm_stepper_.get(), guest_stepper_.get()};
}

void VcpuRunner::save_state(StateSections& s, const std::vector<uint32_t>& msrs) {
  VcpuArchState arch = kvm_->save_state(msrs);
  VcpuCounts counts{counted_, task_, interrupts_.pmi_pending, page_faults_.delivered,
                    page_faults_.dropped};
  save_vcpu_sections(s, state_parts(arch, counts));
}

VcpuArchState VcpuRunner::load_state(const StateSections& s) {
  VcpuArchState arch;
  VcpuCounts counts;
  load_vcpu_sections(s, state_parts(arch, counts), host_.options().profile);
  counted_ = counts.counted;
  task_ = counts.task;
  interrupts_.pmi_pending = counts.pmi_pending;
  page_faults_.delivered = counts.page_faults_delivered;
  page_faults_.dropped = counts.page_faults_dropped;
  return arch;
}

void VcpuRunner::apply_kvm_state(const VcpuArchState& arch, const std::vector<uint32_t>& msrs) {
  kvm_->restore_state(arch, msrs);
  kvm_->load_exit_state();
  debug_unknown_ = true;
}

nlohmann::json VcpuRunner::pmu_state() {
  pmu::lwp::LwpUnit& lwp = pmu_->lwp();
  const pmu::lwp::UnitStats& st = lwp.stats();
  nlohmann::json j = {{"vcpu", index()},
                      {"counted_instructions", counted_},
                      {"lwp",
                       {{"lwpmsr0", lwp.lwpmsr0()},
                        {"lwpcb", lwp.lwpcb_address()},
                        {"records_stored", st.records_stored},
                        {"records_missed", st.records_missed},
                        {"interrupts", st.interrupts},
                        {"page_faults", st.page_faults}}}};
  if (pmu::netburst::NetburstPmu* nb = pmu_->netburst()) {
    const pmu::netburst::PmuState s = nb->state();
    j["netburst"] = {
        {"counters",
         std::vector<uint64_t>(s.counters.begin(), s.counters.begin() + s.counter_count)},
        {"cccrs", std::vector<uint32_t>(s.cccrs.begin(), s.cccrs.begin() + s.counter_count)},
        {"escrs", s.escrs}};
  }
  return j;
}

void VcpuRunner::log_rate_limit() const {
  // Storm protection at work: said, with the counts that add up.
  if (const pmu::RateLimitedInterruptSink& l = *limited_; l.throttled() > 0)
    spdlog::warn(
        "vCPU {}: --max-interrupt-rate {}/s held back {} PMU interrupt requests, {} of "
        "them coalesced into one already held; {} delivered{}",
        index(), host_.options().max_interrupts_per_second, l.throttled(), l.coalesced(),
        l.delivered(), l.has_pending() ? " (the run ended while one was still held)" : "");
}

void VcpuRunner::log_closing_lines() const {
  if (const pmu::netburst::NetburstPmu* nb = pmu_->netburst(); nb && nb->stats().pmis > 0)
    spdlog::info("vCPU {}: the NetBurst PMU raised {} PMI(s)", index(), nb->stats().pmis);
  if (const uint64_t n = interrupts_.undeliverable_pmis.seen(); n > 0)
    spdlog::warn("vCPU {}: {} PMI(s) dropped: LVTPC's delivery mode is neither fixed nor NMI",
                 index(), n);
  if (page_faults_.delivered || page_faults_.dropped)
    spdlog::info("vCPU {}: LWP #PF traps: {} delivered, {} dropped (raised by SYSCALL)", index(),
                 page_faults_.delivered, page_faults_.dropped);
  // What stepping cost: steps per counted instruction (bench/, docs/stepping.md).
  if (kvm_stepper_) {
    const StepController::Stats& st = kvm_stepper_->stats();
    spdlog::info(
        "vCPU {}: KVM stepper: {} user instructions at their successor breakpoint, {} "
        "single-stepped, {} kernel instructions stepped, {} stops at kernel return "
        "sites ({} into counted user mode), {} #DBs handed back to the guest, {} CPL-3 "
        "instructions counted",
        index(), st.user_steps, st.single_steps, st.kernel_steps, st.return_stops, st.user_returns,
        st.guest_debug_exceptions, counted_);
    if (st.missed_returns)
      spdlog::warn(
          "vCPU {}: {} time(s) user mode was found running past every watched kernel "
          "return site: instructions in between were not counted",
          index(), st.missed_returns);
  } else if (guest_stepper_) {
    spdlog::info(
        "vCPU {}: guest-assisted stepper: {} CPL-3 and 0 CPL-0 steps, {} CPL-3 "
        "instructions counted",
        index(), guest_stepper_->steps(), counted_);
  }
  if (host_counters_)
    spdlog::info(
        "vCPU {}: host backend: {} free runs ({} ended by an overflow), {} of {} "
        "counted instructions unseen, {} overshot",
        index(), host_stats_.free_runs, host_stats_.overflow_ends, host_stats_.unseen_instructions,
        counted_, host_stats_.overshoots);
}

void VcpuRunner::print_stats() const {
  // Stops that each counted one instruction (a successor breakpoint or a single-step trap),
  // and stops that counted a block of several (DESIGN §4.7, block stepping).
  uint64_t steps = 0;
  uint64_t blocks = 0;
  if (kvm_stepper_) {
    const StepController::Stats& st = kvm_stepper_->stats();
    steps = st.user_steps + st.single_steps + st.kernel_steps;
    blocks = st.blocks;
  } else if (guest_stepper_) {
    steps = guest_stepper_->steps();
  }
  std::fprintf(stderr,
               "pmuvm: vcpu%u: exits %llu, single steps %llu, blocks %llu, counted instructions "
               "%llu\n",
               index(), static_cast<unsigned long long>(exit_count_),
               static_cast<unsigned long long>(steps), static_cast<unsigned long long>(blocks),
               static_cast<unsigned long long>(counted_));
  // Where the exits went (bench/stepper_bench, and why a run costs what it costs).
  if (kvm_stepper_) {
    const StepController::Stats& st = kvm_stepper_->stats();
    std::fprintf(
        stderr,
        "pmuvm: vcpu%u: exits by kind: debug %llu, I/O %llu, MSR %llu, other %llu; "
        "stepper: user steps %llu, single steps %llu, kernel steps %llu, return stops "
        "%llu (%llu into counted user mode), interrupt windows %llu, guest #DBs %llu, "
        "missed returns %llu; blocks %llu of %llu instructions, blocks refused for "
        "lack of debug slots %llu, blocks a fault ended inside %llu\n",
        index(), static_cast<unsigned long long>(debug_exits_),
        static_cast<unsigned long long>(io_exits_), static_cast<unsigned long long>(msr_exits_),
        static_cast<unsigned long long>(exit_count_ - debug_exits_ - io_exits_ - msr_exits_),
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
        static_cast<unsigned long long>(st.blocks_refused_for_slots),
        static_cast<unsigned long long>(st.blocks_left_by_faults));
  }
  // The host backend: what a host PMU would have cost. With the double the guest was stepped
  // through its free runs too; a host PMU has one kick per overflow instead of those steps.
  if (host_counters_) {
    const HostStats& h = host_stats_;
    const uint64_t pmu_exits = exit_count_ - h.steps_while_free + h.overflow_ends;
    std::fprintf(stderr,
                 "pmuvm: vcpu%u: host backend: free runs %llu, ended by overflow %llu, unseen "
                 "instructions %llu, overshoots %llu, exits with a host PMU %llu (%.4f per "
                 "counted instruction)\n",
                 index(), static_cast<unsigned long long>(h.free_runs),
                 static_cast<unsigned long long>(h.overflow_ends),
                 static_cast<unsigned long long>(h.unseen_instructions),
                 static_cast<unsigned long long>(h.overshoots),
                 static_cast<unsigned long long>(pmu_exits),
                 counted_ ? static_cast<double>(pmu_exits) / counted_ : 0.0);
  }
}

}  // namespace vmm
