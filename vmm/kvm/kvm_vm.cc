#include "vmm/kvm/kvm_vm.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstring>

#include "vmm/vmm_error.h"

namespace vmm {

KvmVm::KvmVm(KvmSystem& kvm, GuestRam& ram) : kvm_(kvm), ram_(ram) {
  kvm.require_capabilities();  // before anything is created: exit 3 naming what is missing
  fd_ = ioctl(kvm.fd(), KVM_CREATE_VM, 0);
  if (fd_ < 0) throw_errno("KVM_CREATE_VM");
  // Intel needs a TSS and identity-map page below 4 GiB outside RAM; harmless on AMD.
  if (ioctl(fd_, KVM_SET_TSS_ADDR, 0xFFFBD000ul) < 0) throw_errno("KVM_SET_TSS_ADDR");
  uint64_t identity = 0xFFFBC000ul;
  if (ioctl(fd_, KVM_SET_IDENTITY_MAP_ADDR, &identity) < 0)
    throw_errno("KVM_SET_IDENTITY_MAP_ADDR");
  if (ioctl(fd_, KVM_CREATE_IRQCHIP, 0) < 0) throw_errno("KVM_CREATE_IRQCHIP");

  set_memory_slots(0);

  kvm_enable_cap cap{};
  cap.cap = KVM_CAP_X86_USER_SPACE_MSR;
  cap.args[0] = KVM_MSR_EXIT_REASON_FILTER;
  if (ioctl(fd_, KVM_ENABLE_CAP, &cap) < 0) throw_errno("KVM_ENABLE_CAP(X86_USER_SPACE_MSR)");
}

bool KvmVm::disable_vpmu() {
  if (!(kvm_.check_extension(KVM_CAP_PMU_CAPABILITY) & KVM_PMU_CAP_DISABLE)) return false;
  kvm_enable_cap cap{};
  cap.cap = KVM_CAP_PMU_CAPABILITY;
  cap.args[0] = KVM_PMU_CAP_DISABLE;
  if (ioctl(fd_, KVM_ENABLE_CAP, &cap) < 0) throw_errno("KVM_ENABLE_CAP(PMU_CAPABILITY)");
  return true;
}

// One slot per RAM region: below the 32-bit MMIO hole, and above 4 GiB (GuestRam). Re-setting a
// slot with other flags (dirty logging) keeps its contents.
void KvmVm::set_memory_slots(uint32_t flags) {
  uint32_t slot = 0;
  for (const GuestRam::Region& r : ram_.regions()) {
    kvm_userspace_memory_region region{};
    region.slot = slot++;
    region.flags = flags;
    region.guest_phys_addr = r.gpa;
    region.memory_size = r.size;
    region.userspace_addr = reinterpret_cast<uint64_t>(r.host);
    if (ioctl(fd_, KVM_SET_USER_MEMORY_REGION, &region) < 0)
      throw_errno("KVM_SET_USER_MEMORY_REGION");
  }
}

KvmVm::~KvmVm() {
  if (fd_ >= 0) close(fd_);
}

void KvmVm::set_msr_filter(const std::vector<MsrRange>& trapped) {
  if (trapped.size() > KVM_MSR_FILTER_MAX_RANGES) throw VmmError("too many trapped MSR ranges");
  kvm_msr_filter filter{};
  filter.flags = KVM_MSR_FILTER_DEFAULT_ALLOW;
  // A 0 bit denies, and a denied access exits to user space (KVM_MSR_EXIT_REASON_FILTER).
  std::vector<std::vector<uint8_t>> bitmaps;
  for (size_t i = 0; i < trapped.size(); ++i) {
    bitmaps.emplace_back((trapped[i].count + 7) / 8, 0);
    filter.ranges[i].flags = KVM_MSR_FILTER_READ | KVM_MSR_FILTER_WRITE;
    filter.ranges[i].base = trapped[i].base;
    filter.ranges[i].nmsrs = trapped[i].count;
    filter.ranges[i].bitmap = bitmaps.back().data();
  }
  if (ioctl(fd_, KVM_X86_SET_MSR_FILTER, &filter) < 0) throw_errno("KVM_X86_SET_MSR_FILTER");
}

void KvmVm::create_pit() {
  kvm_pit_config config{};  // flags 0: a real speaker port (0x61), not KVM_PIT_SPEAKER_DUMMY
  if (ioctl(fd_, KVM_CREATE_PIT2, &config) < 0) throw_errno("KVM_CREATE_PIT2");
}

void KvmVm::set_irq_line(uint32_t gsi, bool level) {
  kvm_irq_level irq{};
  irq.irq = gsi;
  irq.level = level ? 1 : 0;
  if (ioctl(fd_, KVM_IRQ_LINE, &irq) < 0) throw_errno("KVM_IRQ_LINE");
}

void KvmVm::signal_msi(uint32_t apic_id, uint8_t vector) {
  kvm_msi msi{};
  msi.address_lo = 0xFEE00000u | (apic_id << 12);  // physical destination, fixed delivery
  msi.data = vector;
  if (ioctl(fd_, KVM_SIGNAL_MSI, &msi) < 0) throw_errno("KVM_SIGNAL_MSI");
}

}  // namespace vmm
