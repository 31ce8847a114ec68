#include "vmm/kvm/kvm_system.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "vmm/vmm_error.h"

namespace vmm {

KvmSystem::KvmSystem(const std::string& path) {
  fd_ = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd_ < 0) {
    const int e = errno;
    std::string hint = e == ENOENT ? " (KVM is not available on this host)"
                       : e == EACCES
                           ? " (no permission: add yourself to the kvm group or run as root)"
                           : "";
    throw VmmError("cannot open " + path + ": " + std::strerror(e) + hint +
                   "; tools/kvm-host/run runs pmuvm in a KVM host (docs/nested-kvm-host.md)");
  }
  const int version = ioctl(fd_, KVM_GET_API_VERSION, 0);
  if (version != KVM_API_VERSION) {
    close(fd_);
    throw VmmError(version < 0
                       ? path +
                             " is not a KVM device (KVM_GET_API_VERSION fails); tools/kvm-host/run "
                             "runs pmuvm in a KVM host (docs/nested-kvm-host.md)"
                       : "unsupported KVM API version " + std::to_string(version) + " at " + path);
  }
}

KvmSystem::~KvmSystem() {
  if (fd_ >= 0) close(fd_);
}

int KvmSystem::check_extension(long capability) const {
  const int r = ioctl(fd_, KVM_CHECK_EXTENSION, capability);
  return r < 0 ? 0 : r;
}

void KvmSystem::require_capabilities() const {
  struct Required {
    long capability;
    const char* name;
    const char* why;
  };
  static constexpr Required kRequired[] = {
      {KVM_CAP_IRQCHIP, "KVM_CAP_IRQCHIP", "in-kernel LAPIC/IOAPIC"},
      {KVM_CAP_IMMEDIATE_EXIT, "KVM_CAP_IMMEDIATE_EXIT", "stopping vCPUs without races"},
      {KVM_CAP_SIGNAL_MSI, "KVM_CAP_SIGNAL_MSI", "LWP threshold interrupts"},
      {KVM_CAP_X86_USER_SPACE_MSR, "KVM_CAP_X86_USER_SPACE_MSR", "PMU MSRs handled by pmuvm"},
      {KVM_CAP_X86_MSR_FILTER, "KVM_CAP_X86_MSR_FILTER", "PMU MSRs handled by pmuvm"},
      {KVM_CAP_SET_GUEST_DEBUG, "KVM_CAP_SET_GUEST_DEBUG", "the KVM single-step stepper"},
      {KVM_CAP_PIT2, "KVM_CAP_PIT2", "the PIT of Linux guests"},
  };
  std::string missing;
  for (const Required& r : kRequired)
    if (!check_extension(r.capability))
      missing += std::string(missing.empty() ? "" : ", ") + r.name + " (" + r.why + ")";
  if (!missing.empty()) throw VmmError("this KVM lacks capabilities pmuvm needs: " + missing);
}

int KvmSystem::vcpu_mmap_size() const {
  const int size = ioctl(fd_, KVM_GET_VCPU_MMAP_SIZE, 0);
  if (size <= 0) throw_errno("KVM_GET_VCPU_MMAP_SIZE");
  return size;
}

std::vector<uint32_t> KvmSystem::msrs_to_save() const {
  kvm_msr_list probe{};
  probe.nmsrs = 0;
  // E2BIG with nmsrs set to the number needed.
  if (ioctl(fd_, KVM_GET_MSR_INDEX_LIST, &probe) < 0 && errno != E2BIG)
    throw_errno("KVM_GET_MSR_INDEX_LIST");
  std::vector<uint32_t> buf(probe.nmsrs + 1);
  auto* list = reinterpret_cast<kvm_msr_list*>(buf.data());
  list->nmsrs = probe.nmsrs;
  if (ioctl(fd_, KVM_GET_MSR_INDEX_LIST, list) < 0) throw_errno("KVM_GET_MSR_INDEX_LIST");
  return std::vector<uint32_t>(list->indices, list->indices + list->nmsrs);
}

std::vector<kvm_cpuid_entry2> KvmSystem::supported_cpuid() const {
  for (int n = 128; n <= 4096; n *= 2) {
    const size_t bytes = sizeof(kvm_cpuid2) + n * sizeof(kvm_cpuid_entry2);
    std::unique_ptr<std::byte[]> buf(new std::byte[bytes]());
    auto* cpuid = reinterpret_cast<kvm_cpuid2*>(buf.get());
    cpuid->nent = n;
    if (ioctl(fd_, KVM_GET_SUPPORTED_CPUID, cpuid) == 0)
      return std::vector<kvm_cpuid_entry2>(cpuid->entries, cpuid->entries + cpuid->nent);
    if (errno != E2BIG) throw_errno("KVM_GET_SUPPORTED_CPUID");
  }
  throw VmmError("KVM_GET_SUPPORTED_CPUID: more than 4096 entries");
}

}  // namespace vmm
