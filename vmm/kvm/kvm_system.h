// /dev/kvm: the system-level KVM handle. Opening it is the first thing `pmuvm run` does after
// validating its inputs; every failure is a VmmError with a reason a user can act on.
#pragma once

#include "vmm/kvm/kvm_abi.h"

#include <string>
#include <vector>

namespace vmm {

class KvmSystem {
 public:
  explicit KvmSystem(const std::string& path = "/dev/kvm");
  ~KvmSystem();
  KvmSystem(const KvmSystem&) = delete;
  KvmSystem& operator=(const KvmSystem&) = delete;

  int fd() const { return fd_; }
  int check_extension(long capability) const;  // KVM_CHECK_EXTENSION (0 = absent)
  // Every capability pmuvm relies on; throws VmmError naming each one that is missing, so a run
  // on an unsuitable host stops at start-up (exit 3) instead of failing halfway through a boot.
  void require_capabilities() const;
  int vcpu_mmap_size() const;
  std::vector<kvm_cpuid_entry2> supported_cpuid() const;
  // KVM_GET_MSR_INDEX_LIST: the MSRs a VMM must save and restore to move a vCPU.
  std::vector<uint32_t> msrs_to_save() const;

 private:
  int fd_ = -1;
};

}  // namespace vmm
