#include "vmm/precise/guest_assisted_stepper.h"

#include <cstddef>
#include <cstring>

#include "guest/abi/pmuvm_abi.h"

namespace vmm {

GuestAssistedStepper::GuestAssistedStepper(GuestRam& ram, const pmu::cache::Geometry& cache)
    : ram_(ram), code_(ram), accountant_(cache), sequencer_(accountant_, code_) {
  sequencer_.ignore_range(PMUVM_TRAMPOLINE_VA, PMUVM_TRAMPOLINE_VA + PMUVM_TRAMPOLINE_SIZE);
}

std::optional<GuestRegisters> GuestAssistedStepper::read_frame(uint64_t frame_gpa,
                                                               const StepContext& ctx) {
  std::optional<GuestRegisters> r = read_user_trap_frame(ram_, frame_gpa, ctx);
  if (!r) {
    ++bad_frames_;  // outside RAM, or not a user-mode frame: the kernel broke the protocol
    return std::nullopt;
  }
  code_.set_cr3(ctx.cr3);
  return r;
}

std::optional<pmu::RetiredInstruction> GuestAssistedStepper::on_step(uint64_t frame_gpa,
                                                                     const StepContext& ctx) {
  ++steps_;
  std::optional<GuestRegisters> regs = read_frame(frame_gpa, ctx);
  if (!regs) {
    sequencer_.leave_user();
    return std::nullopt;
  }
  return sequencer_.step(*regs);
}

bool GuestAssistedStepper::mark_page_fault(uint64_t frame_gpa, uint32_t error_code) {
  pmuvm_trap_frame f;
  if (!ram_.read(frame_gpa, std::as_writable_bytes(std::span(&f, 1)))) return false;
  if (f.vector != 1 || (f.cs & 3) != 3 || f.rip == PMUVM_TRAMPOLINE_VA) return false;
  return ram_.write_u64(frame_gpa + offsetof(pmuvm_trap_frame, vector),
                        PMUVM_VECTOR_LWP_PAGE_FAULT) &&
         ram_.write_u64(frame_gpa + offsetof(pmuvm_trap_frame, error), error_code);
}

std::optional<pmu::RetiredInstruction> GuestAssistedStepper::on_user_entry(uint64_t frame_gpa,
                                                                           const StepContext& ctx) {
  std::optional<GuestRegisters> regs = read_frame(frame_gpa, ctx);
  if (!regs) {
    sequencer_.leave_user();
    return std::nullopt;
  }
  return sequencer_.enter_user(*regs);
}

}  // namespace vmm
