// The last few KVM exits of one vCPU, kept so that a guest that dies (a triple fault, a KVM
// internal error) can be told with where it was just before. On AMD SVM, KVM resets the vCPU on a
// shutdown intercept, so after a triple fault these exits are all that is left of the crash site.
// Costs one copy of a few registers per exit (KVM_CAP_SYNC_REGS puts them in the kvm_run page).
#pragma once

#include "vmm/kvm/kvm_abi.h"

#include <array>
#include <cstdint>
#include <string>

namespace vmm {

class ExitHistory {
 public:
  static constexpr size_t kDepth = 16;

  // One exit, as the kvm_run page and the synced registers show it.
  void record(const kvm_run& run, const kvm_regs& regs, const kvm_sregs& sregs);
  // The recorded exits, oldest first, one per line, numbered from the vCPU's first exit (0),
  // no newline after the last ("" when none).
  std::string describe() const;

 private:
  struct Exit {
    uint32_t reason = 0;
    uint64_t detail = 0;  // I/O port, MSR index, DR6 of a debug exit, MMIO address
    uint64_t rip = 0, rsp = 0, rflags = 0, cr3 = 0, cr2 = 0;
    uint8_t cpl = 0;
  };
  std::array<Exit, kDepth> exits_{};
  uint64_t count_ = 0;
};

}  // namespace vmm
