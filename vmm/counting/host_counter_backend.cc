#include "vmm/counting/host_counter_backend.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "vmm/host/perf_host_counters.h"
#include "vmm/vmm_error.h"

namespace vmm {

HostCounterBackend::HostCounterBackend(CountedVcpu& vcpu, GuestRam& ram,
                                       const pmu::cache::Geometry& cache,
                                       const HostBackendChoice& choice, bool block_steps,
                                       bool trap_flag_steps, int kick_signal)
    : OverKvmStepping(vcpu, ram, cache, block_steps, trap_flag_steps,
                      static_cast<UnseenRun*>(this)),
      vcpu_(vcpu),
      choice_(choice) {
  if (choice.counter_double) {
    auto counters = std::make_unique<SkiddingCounterDouble>(choice.double_skid);
    counter_double_ = counters.get();
    counters_ = std::move(counters);
  } else {
    counters_ = std::make_unique<PerfHostCounters>(kick_signal);
  }
}

void HostCounterBackend::before_run() {
  arm_free_run();
  stepping_.before_run();
}

void HostCounterBackend::after_run(bool kicked, bool debug_exit) {
  // The exit ends a free run before it is handled (it may change what the models count). The
  // double's steps continue it: what they retire goes to the double. A kick between two of its
  // steps (the release ticker's; nothing retired) continues it too: ended there, the double's
  // overflows would depend on when the host got to the ticker, and a test of a chosen skid
  // would see it only when no kick fell between the overflow and its signal. A pause still ends
  // it (settle()).
  if (free_run_) {
    if (counter_double_ && debug_exit)
      ++stats_.steps_while_free;
    else if (!(counter_double_ && kicked))
      end_free_run();
  }
  stepping_.after_run(kicked, debug_exit);
}

void HostCounterBackend::count(const RetiredInstructions& retired) {
  bool overflow = false;
  for (const pmu::RetiredInstruction& insn : retired) overflow |= counter_double_->count(insn);
  if (overflow) end_free_run();
}

void HostCounterBackend::arm_free_run() {
  if (free_run_ || fell_back_) return;
  // Nothing counts: the precise backend counts nothing either (and with the double nothing
  // would be stepped to count).
  if (step_scope(vcpu_.pmu()) == StepScope::kNothing) return;
  pmu::UnseenAllowance allowance = vcpu_.pmu().unseen_allowance();
  // A --pause-at-instructions point is a boundary too.
  if (const std::optional<uint64_t> to_pause = vcpu_.instructions_to_pause())
    allowance.instructions = std::min(allowance.instructions, *to_pause);
  const std::optional<FreeRun> run = plan_free_run(allowance, choice_.free_run);
  if (!run) return;
  try {
    counters_->arm(*run);
  } catch (const VmmError& e) {
    // The start-up probe opened the same counter on the main thread; should the vCPU thread's
    // fail, the run goes on exactly, stepped.
    spdlog::warn("vCPU {}: {}; this vCPU counts by stepping from now on", vcpu_.index(), e.what());
    fell_back_ = true;
    return;
  }
  free_run_ = run;
  ++stats_.free_runs;
}

void HostCounterBackend::end_free_run() {
  if (!free_run_) return;
  const FreeRun run = *std::exchange(free_run_, std::nullopt);
  const pmu::UnseenRetirements counted = counters_->disarm();
  // Ended by the overflow (a kick), or by another exit before it.
  if (run.reached_a_period(counted)) ++stats_.overflow_ends;
  const FreeRunAccount account = account_free_run(run, counted);
  vcpu_.pmu().retire_unseen(account.batch);
  stats_.unseen_instructions += account.batch.instructions;
  vcpu_.add_counted(account.batch.instructions);
  if (account.overshot()) retire_past_boundary(account.past);
}

void HostCounterBackend::retire_past_boundary(const pmu::UnseenRetirements& past) {
  fell_back_ = true;
  ++stats_.overshoots;
  KvmVcpu& kvm = vcpu_.kvm();
  const uint64_t rip = kvm.exit_regs().rip;
  const kvm_sregs sregs = kvm.exit_sregs();
  spdlog::warn(
      "vCPU {}: the host counters' overflow came {} instruction(s) past an event "
      "boundary (a skid beyond the margin of {}): what it shows (a record, a PMI) comes "
      "late, at rip {:#x}; this vCPU is stepped from now on",
      vcpu_.index(), past.instructions, choice_.free_run.skid_margin, rip);
  // Which of them were branches, and where, is unknown: the conditional branches come first,
  // then the other branches (direct jumps).
  pmu::RetiredInstruction late;
  late.rip = rip;
  late.cpl = 3;
  uint64_t left = past.instructions;
  uint64_t branches = past.branches;  // account_free_run: conditional ones are among them
  uint64_t conditional = past.conditional_branches;
  while (left > 0) {
    RetiredInstructions chunk;
    for (; left > 0 && chunk.size() < RetiredInstructions::kCapacity; --left) {
      late.branch = {};
      if (branches > 0) {
        --branches;
        late.branch.kind =
            conditional > 0 ? pmu::BranchKind::kConditional : pmu::BranchKind::kDirectJump;
        if (conditional > 0) --conditional;
        late.branch.taken = true;
        late.branch.next_rip = rip;
      }
      chunk.push_back(late);
    }
    stepping_.retire_all(chunk, sregs.ss.dpl, sregs.cr3);
  }
}

void HostCounterBackend::log_closing_lines() const {
  stepping_.log_closing_lines();
  spdlog::info(
      "vCPU {}: host backend: {} free runs ({} ended by an overflow), {} of {} "
      "counted instructions unseen, {} overshot",
      vcpu_.index(), stats_.free_runs, stats_.overflow_ends, stats_.unseen_instructions,
      vcpu_.counted(), stats_.overshoots);
}

void HostCounterBackend::print_stats(std::FILE* out, const ExitTally& exits) const {
  stepping_.print_stats(out, exits);
  // What a host PMU would have cost. With the double the guest was stepped through its free
  // runs too; a host PMU has one kick per overflow instead of those steps.
  const uint64_t pmu_exits = exits.all - stats_.steps_while_free + stats_.overflow_ends;
  const uint64_t counted = vcpu_.counted();
  std::fprintf(out,
               "pmuvm: vcpu%u: host backend: free runs %llu, ended by overflow %llu, unseen "
               "instructions %llu, overshoots %llu, exits with a host PMU %llu (%.4f per "
               "counted instruction)\n",
               vcpu_.index(), static_cast<unsigned long long>(stats_.free_runs),
               static_cast<unsigned long long>(stats_.overflow_ends),
               static_cast<unsigned long long>(stats_.unseen_instructions),
               static_cast<unsigned long long>(stats_.overshoots),
               static_cast<unsigned long long>(pmu_exits),
               counted ? static_cast<double>(pmu_exits) / counted : 0.0);
}

}  // namespace vmm
