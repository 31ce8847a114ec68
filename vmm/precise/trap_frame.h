// The bundled kernel's trap frame as its PV MSRs report it (PMUVM_MSR_STEP, PMUVM_MSR_USER_ENTRY
// carry its guest-physical address; guest/abi/pmuvm_abi.h): read from guest RAM and turned into
// the user-mode registers it holds. Both steppers use it: the guest-assisted one for every step,
// the KVM one for the state a return to user mode resumes with.
#pragma once

#include <cstdint>
#include <optional>

#include "vmm/memory/guest_ram.h"
#include "vmm/precise/instruction_decoder.h"

namespace vmm {

// What the run loop knows at the PV MSR exit besides the frame.
struct StepContext {
  uint64_t cr3 = 0;
  uint64_t fs_base = 0, gs_base = 0;
};

// nullopt when the frame is not in guest RAM or is not a user-mode (CPL 3) frame: the kernel
// broke the protocol.
std::optional<GuestRegisters> read_user_trap_frame(const GuestRam& ram, uint64_t frame_gpa,
                                                   const StepContext& ctx);

}  // namespace vmm
