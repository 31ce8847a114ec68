// The last few KVM exits of one vCPU, kept so that a guest that dies (a triple fault, a KVM
// internal error) can be told with where it was just before. On AMD SVM, KVM resets the vCPU on a
// shutdown intercept, so after a triple fault these exits are all that is left of the crash site.
// Costs one copy of a few registers per exit, read from the kvm_run page where KVM_CAP_SYNC_REGS
// put them; without that capability only the exit itself is kept (no ioctl on every exit).
#pragma once

#include "vmm/kvm/kvm_abi.h"

#include <array>
#include <cstdint>
#include <string>

namespace vmm {

class ExitHistory {
 public:
  static constexpr size_t kDepth = 16;

  // One exit, as the kvm_run page shows it (its registers when KVM synced them there).
  void record(const kvm_run& run);
  // The recorded exits, oldest first, one per line, numbered from the vCPU's first exit (0),
  // no newline after the last ("" when none).
  std::string describe() const;

 private:
  struct Exit {
    uint32_t reason = 0;
    uint64_t detail = 0;     // I/O port, MSR index, DR6 of a debug exit, MMIO address
    bool registers = false;  // the registers below were synced into the kvm_run page
    uint64_t rip = 0, rsp = 0, rflags = 0, cr3 = 0, cr2 = 0;
    uint8_t cpl = 0;
  };
  std::array<Exit, kDepth> exits_{};
  uint64_t count_ = 0;
};

}  // namespace vmm
