// The host backend's side of the run loop (DESIGN §4.11, rr's method). Between the PMU models'
// event boundaries a vCPU runs unseen while its host counters count CPL-3 instructions (and
// branches); they overflow the skid margin short of the next boundary (vmm/host/free_run.h).
// Any return from KVM_RUN — the overflow's kick, an exit — ends the free run before the exit
// is handled, and the models take the count as one batch; the instructions left up to the
// boundary are stepped by the KVM stepper exactly as with the precise backend, so the event is
// seen at its instruction and the records are the precise backend's.
//
// With the counter double (--host-counters double) the KVM stepper steps the guest all along,
// and during a free run what it retires goes to the double instead of the models: the same
// algorithm, with overflows that come a chosen number of instructions late.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "vmm/machine/vcpu_runner.h"

namespace vmm {

void VcpuRunner::arm_free_run() {
  if (!host_counters_ || free_run_ || host_fell_back_) return;
  // Nothing counts: the precise backend counts nothing either (and with the double nothing
  // would be stepped to count).
  if (step_scope() == StepScope::kNothing) return;
  pmu::UnseenAllowance allowance = pmu_->unseen_allowance();
  // A --pause-at-instructions point is a boundary too.
  if (const std::optional<uint64_t> to_pause = host_.progress().instructions_to_pause())
    allowance.instructions = std::min(allowance.instructions, *to_pause);
  const std::optional<FreeRun> run =
      plan_free_run(allowance, host_.options().host_backend->free_run);
  if (!run) return;
  try {
    host_counters_->arm(*run);
  } catch (const VmmError& e) {
    // The start-up probe opened the same counter on the main thread; should the vCPU thread's
    // fail, the run goes on exactly, stepped.
    spdlog::warn("vCPU {}: {}; this vCPU counts by stepping from now on", index(), e.what());
    host_fell_back_ = true;
    return;
  }
  free_run_ = run;
  ++host_stats_.free_runs;
}

void VcpuRunner::end_free_run() {
  if (!free_run_) return;
  const FreeRun run = *std::exchange(free_run_, std::nullopt);
  const pmu::UnseenRetirements counted = host_counters_->disarm();
  // Ended by the overflow (a kick), or by another exit before it.
  if ((run.instruction_period && counted.instructions >= *run.instruction_period) ||
      (run.branch_period && counted.branches >= *run.branch_period))
    ++host_stats_.overflow_ends;
  const FreeRunAccount account = account_free_run(run, counted);
  pmu_->retire_unseen(account.batch);
  host_stats_.unseen_instructions += account.batch.instructions;
  count_instructions(account.batch.instructions);
  if (account.overshot()) retire_past_boundary(account.past);
}

void VcpuRunner::retire_past_boundary(const pmu::UnseenRetirements& past) {
  host_fell_back_ = true;
  ++host_stats_.overshoots;
  const uint64_t rip = kvm_->exit_regs().rip;
  const kvm_sregs sregs = kvm_->exit_sregs();
  spdlog::warn(
      "vCPU {}: the host counters' overflow came {} instruction(s) past an event "
      "boundary (a skid beyond the margin of {}): what it shows (a record, a PMI) comes "
      "late, at rip {:#x}; this vCPU is stepped from now on",
      index(), past.instructions, host_.options().host_backend->free_run.skid_margin, rip);
  // Which of them were branches, and where, is unknown: the branches come first.
  pmu::RetiredInstruction late;
  late.rip = rip;
  late.cpl = 3;
  uint64_t left = past.instructions;
  uint64_t branches = past.branches;
  while (left > 0) {
    RetiredInstructions chunk;
    for (; left > 0 && chunk.size() < RetiredInstructions::kCapacity; --left) {
      late.branch = {};
      if (branches > 0) {
        --branches;
        late.branch.kind = pmu::BranchKind::kConditional;
        late.branch.taken = true;
        late.branch.next_rip = rip;
      }
      chunk.push_back(late);
    }
    retire_all(chunk, sregs.ss.dpl, sregs.cr3);
  }
}

}  // namespace vmm
