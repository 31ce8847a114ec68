#include "vmm/precise/trap_frame.h"

#include <span>

#include "guest/abi/pmuvm_abi.h"

namespace vmm {

std::optional<GuestRegisters> read_user_trap_frame(const GuestRam& ram, uint64_t frame_gpa,
                                                   const StepContext& ctx) {
  pmuvm_trap_frame f;
  if (!ram.read(frame_gpa, std::as_writable_bytes(std::span(&f, 1))) || (f.cs & 3) != 3)
    return std::nullopt;
  GuestRegisters r = general_registers(f);
  r.fs_base = ctx.fs_base, r.gs_base = ctx.gs_base;
  r.cr3 = ctx.cr3;
  return r;
}

}  // namespace vmm
