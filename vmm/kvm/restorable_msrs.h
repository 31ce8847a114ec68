// Which MSRs of a snapshot's vCPU state pmuvm hands to KVM on restore (DESIGN §4.12: a state
// blob is untrusted, and KVM_SET_MSRS from the VMM may set MSRs the guest itself may not).
#pragma once

#include <cstdint>
#include <vector>

#include "vmm/kvm/kvm_state.h"

namespace vmm {

// KVM's own paravirtual MSRs (kvm-clock 0x11/0x12 and 0x4B564Dxx) and Hyper-V's
// (0x40000000-0x400000FF): pmuvm guests are offered neither (no KVM or Hyper-V CPUID signature),
// and writing them on restore has side effects: a kvm-clock wall-clock write of 0 makes KVM store
// the wall clock at guest-physical 0. pmuvm's own PV MSRs (0x40000040-0x4000004F) are not KVM's.
bool kvm_or_hyperv_pv_msr(uint32_t msr);

struct MsrSelection {
  std::vector<MsrValue> restore;  // in the saved order
  std::vector<uint32_t> dropped;  // what the state named besides (repeats included)
};

// The saved MSRs that are in `host_list` (KVM_GET_MSR_INDEX_LIST: what pmuvm saves) and not
// paravirtual, each once; the rest dropped.
MsrSelection restorable_msrs(const std::vector<MsrValue>& saved,
                             const std::vector<uint32_t>& host_list);

}  // namespace vmm
