// KvmVm's snapshot and dirty-log ioctls (kvm_vm.h).
#include <sys/ioctl.h>

#include "vmm/kvm/kvm_vm.h"
#include "vmm/vmm_error.h"

namespace vmm {
namespace {

kvm_irqchip get_chip(int fd, uint32_t id) {
  kvm_irqchip chip{};
  chip.chip_id = id;
  if (ioctl(fd, KVM_GET_IRQCHIP, &chip) < 0) throw_errno("KVM_GET_IRQCHIP");
  return chip;
}

void set_chip(int fd, kvm_irqchip chip, uint32_t id) {
  chip.chip_id = id;
  if (ioctl(fd, KVM_SET_IRQCHIP, &chip) < 0) throw_errno("KVM_SET_IRQCHIP");
}

}  // namespace

VmArchState KvmVm::save_state(bool has_pit) const {
  VmArchState s;
  s.pic_master = get_chip(fd_, KVM_IRQCHIP_PIC_MASTER);
  s.pic_slave = get_chip(fd_, KVM_IRQCHIP_PIC_SLAVE);
  s.ioapic = get_chip(fd_, KVM_IRQCHIP_IOAPIC);
  if (has_pit) {
    s.pit.emplace();
    if (ioctl(fd_, KVM_GET_PIT2, &*s.pit) < 0) throw_errno("KVM_GET_PIT2");
  }
  if (ioctl(fd_, KVM_GET_CLOCK, &s.clock) < 0) throw_errno("KVM_GET_CLOCK");
  return s;
}

void KvmVm::restore_state(const VmArchState& s) {
  set_chip(fd_, s.pic_master, KVM_IRQCHIP_PIC_MASTER);
  set_chip(fd_, s.pic_slave, KVM_IRQCHIP_PIC_SLAVE);
  set_chip(fd_, s.ioapic, KVM_IRQCHIP_IOAPIC);
  if (s.pit && ioctl(fd_, KVM_SET_PIT2, &*s.pit) < 0) throw_errno("KVM_SET_PIT2");
  kvm_clock_data clock{};
  clock.clock = s.clock.clock;  // flags must be 0 (KVM_CLOCK_REALTIME needs a matching host)
  if (ioctl(fd_, KVM_SET_CLOCK, &clock) < 0) throw_errno("KVM_SET_CLOCK");
}

void KvmVm::set_dirty_logging(bool enabled) {
  set_memory_slots(enabled ? KVM_MEM_LOG_DIRTY_PAGES : 0);
}

std::vector<uint64_t> KvmVm::take_dirty_pages() {
  std::vector<uint64_t> pages;
  uint32_t slot = 0;
  for (const GuestRam::Region& r : ram_.regions()) {
    const uint64_t npages = r.size / 4096;
    std::vector<uint64_t> bitmap((npages + 63) / 64, 0);
    kvm_dirty_log log{};
    log.slot = slot++;
    log.dirty_bitmap = bitmap.data();
    if (ioctl(fd_, KVM_GET_DIRTY_LOG, &log) < 0) throw_errno("KVM_GET_DIRTY_LOG");
    for (uint64_t w = 0; w < bitmap.size(); ++w)
      for (uint64_t bits = bitmap[w]; bits; bits &= bits - 1)
        pages.push_back(r.gpa / 4096 + w * 64 + __builtin_ctzll(bits));
  }
  return pages;
}

}  // namespace vmm
