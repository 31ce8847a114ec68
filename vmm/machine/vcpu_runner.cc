#include "vmm/machine/vcpu_runner.h"

#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <exception>
#include <string>

#include "pmu/state_archive.h"
#include "vmm/counting/make_counting_backend.h"

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

VcpuRunner::VcpuRunner(VcpuHost& host, KvmVm& vm, GuestRam& ram, uint32_t index)
    : host_(host), kvm_(std::make_unique<KvmVcpu>(vm, index)) {
  const MachineOptions& options = host.options();
  const GuestCpu& cpu = host.guest_cpu();
  kvm_->set_cpuid(to_kvm(cpuid_for_vcpu(cpu.cpuid, index)));  // APIC ID = the vCPU index
  interrupts_.vm = &vm;
  interrupts_.vcpu = kvm_.get();
  interrupts_.apic_id = index;
  limited_ = std::make_unique<pmu::RateLimitedInterruptSink>(interrupts_, host.clock(),
                                                             options.max_interrupt_rate);
  tap_.limited = limited_.get();
  pmu_ =
      std::make_unique<VcpuPmu>(index, index, cpu.lwp, options.seed, ram, tap_, cpu.netburst,
                                &page_faults_, cpu.arch_pmu, [this] { return pebs_registers(); });
  backend_ =
      make_counting_backend(options.counting, *this, ram, cpu.cache, options.vcpus, kKickSignal);
}

pmu::arch_perfmon::PebsRegisters VcpuRunner::pebs_registers() {
  constexpr uint32_t kMsrTsc = 0x10;
  const kvm_regs r = kvm_->exit_regs();
  return pmu::arch_perfmon::PebsRegisters{.rflags = r.rflags,
                                          .rip = r.rip,
                                          .rax = r.rax,
                                          .rbx = r.rbx,
                                          .rcx = r.rcx,
                                          .rdx = r.rdx,
                                          .rsi = r.rsi,
                                          .rdi = r.rdi,
                                          .rbp = r.rbp,
                                          .rsp = r.rsp,
                                          .r8 = r.r8,
                                          .r9 = r.r9,
                                          .r10 = r.r10,
                                          .r11 = r.r11,
                                          .r12 = r.r12,
                                          .r13 = r.r13,
                                          .r14 = r.r14,
                                          .r15 = r.r15,
                                          .tsc = kvm_->msr(kMsrTsc)};
}

void VcpuRunner::add_counted(uint64_t n) {
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
        backend_->settle();  // a snapshot saves the models with everything counted
        host_.park(index());
        continue;
      }
      // A vCPU on its way to being parked only completes its last exit (immediate_exit: no
      // guest instruction runs), so its counting state is left as it is.
      if (pausing)
        kvm_->run_state()->immediate_exit = 1;
      else
        backend_->before_run();
      const int r = kvm_->run();
      kvm_->run_state()->immediate_exit = 0;  // before looking at why: see kick()
      if (!after_run(r)) break;
    }
    backend_->settle();  // the run ended (another vCPU's exit): the report counts everything
  } catch (const std::exception& e) {
    host_.fail(e.what());
  }
}

bool VcpuRunner::after_run(int r) {
  // A kick (r < 0: EINTR/EAGAIN) stops the vCPU between instructions: nothing retired, no exit.
  const bool kicked = r < 0;
  const ExitTally::Kind kind = kicked ? ExitTally::kNoExit : exit_tally_.add(*kvm_->run_state());
  // Any KVM_RUN, even one that returns EINTR at once, completes the previous exit's access.
  needs_completion_ = kind == ExitTally::kIo || kind == ExitTally::kMsr;
  if (!kicked) {
    exits_.record(*kvm_->run_state());
    exits_seen_.store(exit_tally_.all, std::memory_order_relaxed);
    counted_seen_.store(counted_, std::memory_order_relaxed);
    host_.exit_taken(index());
  }
  backend_->after_run(kicked, kind == ExitTally::kDebug);
  const uint64_t sent = interrupts_.sent;
  limited_->poll();                   // storm protection: release held interrupts when allowed
  interrupts_.deliver_pending_pmi();  // a PMI waiting for the guest to unmask LVTPC
  if (!kicked && !dispatch()) return false;  // a kick: re-check stop
  backend_->after_exit(interrupts_.sent != sent, kicked);
  release_at_ns_ = limited_->next_release_ns().value_or(0);
  return true;
}

VcpuParts VcpuRunner::state_parts(VcpuArchState& arch, VcpuCounts& counts) {
  return VcpuParts{index(), arch, *pmu_, counts, *limited_, *backend_, host_.guest_cpu()};
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
  load_vcpu_sections(s, state_parts(arch, counts));
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
  if (const pmu::arch_perfmon::ArchPmu* ap = pmu_->arch_pmu()) {
    const pmu::arch_perfmon::ArchPmuState& s = ap->state();
    const pmu::arch_perfmon::Config& c = ap->config();
    j["arch_pmu"] = {
        {"pmcs", std::vector<uint64_t>(s.pmc.begin(), s.pmc.begin() + c.counters)},
        {"evtsels", std::vector<uint64_t>(s.evtsel.begin(), s.evtsel.begin() + c.counters)},
        {"fixed", std::vector<uint64_t>(s.fixed.begin(), s.fixed.begin() + c.fixed_counters)},
        {"fixed_ctrl", s.fixed_ctrl},
        {"global_ctrl", s.global_ctrl},
        {"global_status", s.global_status},
        {"pmis", ap->stats().pmis}};
    if (c.pebs)
      j["arch_pmu"]["pebs"] = {{"pebs_enable", s.pebs_enable},
                               {"ds_area", s.ds_area},
                               {"records", ap->stats().pebs_records},
                               {"dropped", ap->stats().pebs_dropped}};
    if (c.lbr)
      j["arch_pmu"]["lbr"] = {
          {"debugctl_lbr", (s.debugctl & 1) != 0}, {"select", s.lbr.select}, {"tos", s.lbr.tos}};
  }
  return j;
}

void VcpuRunner::log_rate_limit() const {
  // Storm protection at work: said, with the counts that add up.
  if (const pmu::RateLimitedInterruptSink& l = *limited_; l.throttled() > 0)
    spdlog::warn(
        "vCPU {}: --max-interrupt-rate {}/s held back {} PMU interrupt requests, {} of "
        "them coalesced into one already held; {} delivered{}",
        index(), host_.options().max_interrupt_rate, l.throttled(), l.coalesced(), l.delivered(),
        l.has_pending() ? " (the run ended while one was still held)" : "");
}

void VcpuRunner::log_closing_lines() const {
  if (const pmu::netburst::NetburstPmu* nb = pmu_->netburst(); nb && nb->stats().pmis > 0)
    spdlog::info("vCPU {}: the NetBurst PMU raised {} PMI(s)", index(), nb->stats().pmis);
  if (const pmu::arch_perfmon::ArchPmu* ap = pmu_->arch_pmu(); ap && ap->stats().pmis > 0)
    spdlog::info("vCPU {}: the architectural PMU raised {} PMI(s)", index(), ap->stats().pmis);
  if (const uint64_t n = interrupts_.undeliverable_pmis.seen(); n > 0)
    spdlog::warn("vCPU {}: {} PMI(s) dropped: LVTPC's delivery mode is neither fixed nor NMI",
                 index(), n);
  if (page_faults_.delivered || page_faults_.dropped)
    spdlog::info("vCPU {}: LWP #PF traps: {} delivered, {} dropped (raised by SYSCALL)", index(),
                 page_faults_.delivered, page_faults_.dropped);
  backend_->log_closing_lines();
}

void VcpuRunner::print_stats() const {
  const CountingBackend::Steps steps = backend_->steps();
  std::fprintf(stderr,
               "pmuvm: vcpu%u: exits %llu, single steps %llu, blocks %llu, counted instructions "
               "%llu\n",
               index(), static_cast<unsigned long long>(exit_tally_.all),
               static_cast<unsigned long long>(steps.single),
               static_cast<unsigned long long>(steps.blocks),
               static_cast<unsigned long long>(counted_));
  backend_->print_stats(stderr, exit_tally_);
}

}  // namespace vmm
