// KvmVcpu's snapshot ioctls (kvm_vcpu.h, kvm_state.h).
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>

#include <memory>

#include "vmm/kvm/kvm_vcpu.h"
#include "vmm/kvm/restorable_msrs.h"
#include "vmm/vmm_error.h"

namespace vmm {
namespace {

// One kvm_msrs block with room for `n` entries.
struct MsrBlock {
  explicit MsrBlock(size_t n)
      : bytes(sizeof(kvm_msrs) + n * sizeof(kvm_msr_entry)), buf(new std::byte[bytes]()) {
    get()->nmsrs = static_cast<uint32_t>(n);
  }
  kvm_msrs* get() { return reinterpret_cast<kvm_msrs*>(buf.get()); }
  size_t bytes;
  std::unique_ptr<std::byte[]> buf;
};

}  // namespace

VcpuArchState KvmVcpu::save_state(const std::vector<uint32_t>& msr_indices) const {
  VcpuArchState s;
  s.regs = regs();  // set_rflags_bits() may have left them in kvm_run for the next KVM_RUN
  if (ioctl(fd_, KVM_GET_SREGS, &s.sregs) < 0) throw_errno("KVM_GET_SREGS");
  get_xsave(s.xsave);
  if (ioctl(fd_, KVM_GET_XCRS, &s.xcrs) < 0) throw_errno("KVM_GET_XCRS");
  if (ioctl(fd_, KVM_GET_LAPIC, &s.lapic) < 0) throw_errno("KVM_GET_LAPIC");
  if (ioctl(fd_, KVM_GET_VCPU_EVENTS, &s.events) < 0) throw_errno("KVM_GET_VCPU_EVENTS");
  if (ioctl(fd_, KVM_GET_MP_STATE, &s.mp_state) < 0) throw_errno("KVM_GET_MP_STATE");
  if (ioctl(fd_, KVM_GET_DEBUGREGS, &s.debugregs) < 0) throw_errno("KVM_GET_DEBUGREGS");
  // KVM_GET_MSRS stops at the first MSR it cannot read and returns how many it read: skip that
  // one (an MSR this vCPU's CPUID does not offer) and go on.
  size_t next = 0;
  while (next < msr_indices.size()) {
    const size_t n = msr_indices.size() - next;
    MsrBlock block(n);
    for (size_t i = 0; i < n; ++i) block.get()->entries[i].index = msr_indices[next + i];
    const int read = ioctl(fd_, KVM_GET_MSRS, block.get());
    if (read < 0) throw_errno("KVM_GET_MSRS");
    for (int i = 0; i < read; ++i)
      if (!kvm_or_hyperv_pv_msr(block.get()->entries[i].index))
        s.msrs.push_back(MsrValue{block.get()->entries[i].index, block.get()->entries[i].data});
    next += static_cast<size_t>(read) + 1;  // +1: the unreadable one
  }
  return s;
}

void KvmVcpu::restore_state(const VcpuArchState& s, const std::vector<uint32_t>& msr_indices) {
  set_regs(s.regs);
  set_xsave(s.xsave);
  // A host without XSAVE reports no XCRs (nr_xcrs 0) and refuses to set any.
  if (s.xcrs.nr_xcrs > 0 && ioctl(fd_, KVM_SET_XCRS, &s.xcrs) < 0) throw_errno("KVM_SET_XCRS");
  write_sregs(s.sregs, "KVM_SET_SREGS");
  // Only what pmuvm itself saves on this host: a crafted state names any MSR it likes.
  const MsrSelection msrs = restorable_msrs(s.msrs, msr_indices);
  if (!msrs.dropped.empty()) {
    // The first few by name: the list is the state's, and one line stays one line.
    constexpr size_t kNamed = 16;
    std::string names;
    for (size_t i = 0; i < msrs.dropped.size() && i < kNamed; ++i)
      names += fmt::format(" {:#x}", msrs.dropped[i]);
    if (msrs.dropped.size() > kNamed)
      names += fmt::format(" and {} more", msrs.dropped.size() - kNamed);
    spdlog::warn(
        "vCPU {}: {} MSR(s) of the saved state not restored (not ones this host's KVM "
        "saves, paravirtual, or repeated):{}",
        index_, msrs.dropped.size(), names);
  }
  // One at a time: KVM_SET_MSRS stops at the first MSR it refuses, and a refused one must be
  // named, not silently take the rest with it.
  for (const MsrValue& m : msrs.restore) {
    MsrBlock block(1);
    block.get()->entries[0].index = m.index;
    block.get()->entries[0].data = m.value;
    if (ioctl(fd_, KVM_SET_MSRS, block.get()) != 1)
      spdlog::debug("vCPU {}: KVM refused MSR {:#x} = {:#x} on restore", index_, m.index, m.value);
  }
  if (ioctl(fd_, KVM_SET_MP_STATE, &s.mp_state) < 0) throw_errno("KVM_SET_MP_STATE");
  if (ioctl(fd_, KVM_SET_LAPIC, &s.lapic) < 0) throw_errno("KVM_SET_LAPIC");
  kvm_vcpu_events events = s.events;
  // KVM applies only the fields the flags name; GET sets all but the SIPI vector's (an AP that
  // waits for its SIPI keeps the vector it was sent).
  events.flags |= KVM_VCPUEVENT_VALID_SIPI_VECTOR;
  if (ioctl(fd_, KVM_SET_VCPU_EVENTS, &events) < 0) throw_errno("KVM_SET_VCPU_EVENTS");
  if (ioctl(fd_, KVM_SET_DEBUGREGS, &s.debugregs) < 0) throw_errno("KVM_SET_DEBUGREGS");
}

void KvmVcpu::load_exit_state() {
  if (!synced_) return;  // exit_regs() reads through the ioctls then
  run_->s.regs.regs = regs();
  run_->s.regs.sregs = sregs();
  exit_regs_current_ = true;
}

}  // namespace vmm
