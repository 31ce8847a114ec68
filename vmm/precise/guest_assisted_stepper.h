// The guest-assisted stepper (DESIGN §4.7), VMM side. The bundled kernel single-steps a profiled
// task with RFLAGS.TF and reports each user-mode step with one WRMSR of PMUVM_MSR_STEP, and each
// return to user mode with PMUVM_MSR_USER_ENTRY; both carry the guest-physical address of the
// kernel's trap frame (guest/abi/pmuvm_abi.h). This class reads that frame from guest RAM, turns
// it into registers, and runs the step sequencer; the run loop hands the result to the vCPU's
// PMU models. No KVM dependency: tested over guest RAM with real page tables.
#pragma once

#include <cstdint>
#include <optional>

#include "pmu/cache/cache_model.h"
#include "pmu/retired_instruction.h"
#include "vmm/memory/page_walker.h"
#include "vmm/precise/step_accountant.h"
#include "vmm/precise/step_sequencer.h"
#include "vmm/precise/trap_frame.h"

namespace vmm {

class GuestAssistedStepper {
 public:
  GuestAssistedStepper(GuestRam& ram, const pmu::cache::Geometry& cache);

  // As StepController::set_model_demand.
  void set_model_demand(std::function<StepAccountant::ModelDemand()> demand) {
    accountant_.set_model_demand(std::move(demand));
  }

  // PMUVM_MSR_STEP: one user instruction retired; returns it (if it counts).
  std::optional<pmu::RetiredInstruction> on_step(uint64_t frame_gpa, const StepContext& ctx);
  // PMUVM_MSR_USER_ENTRY: returns the SYSCALL that retired before this entry, if any.
  std::optional<pmu::RetiredInstruction> on_user_entry(uint64_t frame_gpa, const StepContext& ctx);

  // LWP's #PF trap for the instruction the last on_step() retired (guest/abi/pmuvm_abi.h,
  // PMUVM_VECTOR_LWP_PAGE_FAULT): marks the reported frame so the kernel handles it as a user #PF
  // after the WRMSR. Returns false, writing nothing, when the frame is not a #DB step report of a
  // user instruction (the syscall path's report: the #PF cannot be delivered there).
  bool mark_page_fault(uint64_t frame_gpa, uint32_t error_code);

  uint64_t bad_frames() const { return bad_frames_; }
  uint64_t steps() const { return steps_; }  // PMUVM_MSR_STEP reports
  const StepSequencer& sequencer() const { return sequencer_; }

  // Snapshot / migration. The version covers the accountant's models (cache, predictor) too.
  // The version of what archive() saves: bump it with any change to that (snapshot sections,
  // vmm/snapshot/state_sections.h).
  static constexpr uint16_t kStateVersion = 1;
  template <class Archive>
  void archive(Archive& a) {
    a(accountant_, sequencer_, bad_frames_, steps_);
  }

 private:
  std::optional<GuestRegisters> read_frame(uint64_t frame_gpa, const StepContext& ctx);

  GuestRam& ram_;
  PagedGuestMemory code_;
  StepAccountant accountant_;
  StepSequencer sequencer_;
  uint64_t bad_frames_ = 0;
  uint64_t steps_ = 0;
};

}  // namespace vmm
