#include "vmm/kvm/kvm_vcpu.h"

#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "vmm/vmm_error.h"

namespace vmm {
namespace {

kvm_segment to_kvm(const SegmentState& s) {
  kvm_segment k{};
  k.base = s.base;
  k.limit = s.limit;
  k.selector = s.selector;
  k.type = s.type;
  k.present = s.present;
  k.dpl = s.dpl;
  k.db = s.db;
  k.s = s.s;
  k.l = s.l;
  k.g = s.g;
  k.unusable = s.present ? 0 : 1;
  return k;
}

}  // namespace

KvmVcpu::KvmVcpu(KvmVm& vm, uint32_t index) : vm_(vm), index_(index) {
  fd_ = ioctl(vm.fd(), KVM_CREATE_VCPU, static_cast<unsigned long>(index));
  if (fd_ < 0) throw_errno("KVM_CREATE_VCPU " + std::to_string(index));
  run_size_ = static_cast<size_t>(vm.system().vcpu_mmap_size());
  void* p = mmap(nullptr, run_size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) throw_errno("mmap of kvm_run");
  run_ = static_cast<kvm_run*>(p);
  constexpr uint64_t kSync = KVM_SYNC_X86_REGS | KVM_SYNC_X86_SREGS;
  if ((vm.system().check_extension(KVM_CAP_SYNC_REGS) & kSync) == kSync) {
    run_->kvm_valid_regs = kSync;
    synced_ = true;
  }
}

KvmVcpu::~KvmVcpu() {
  if (run_) munmap(run_, run_size_);
  if (fd_ >= 0) close(fd_);
}

void KvmVcpu::set_cpuid(const std::vector<kvm_cpuid_entry2>& entries) {
  const size_t bytes = sizeof(kvm_cpuid2) + entries.size() * sizeof(kvm_cpuid_entry2);
  std::unique_ptr<std::byte[]> buf(new std::byte[bytes]());
  auto* cpuid = reinterpret_cast<kvm_cpuid2*>(buf.get());
  cpuid->nent = static_cast<uint32_t>(entries.size());
  std::copy(entries.begin(), entries.end(), cpuid->entries);
  if (ioctl(fd_, KVM_SET_CPUID2, cpuid) < 0) throw_errno("KVM_SET_CPUID2");
}

void KvmVcpu::enter_long_mode(const LongModeState& state, uint64_t rip, uint64_t rdi,
                              uint64_t rsi) {
  kvm_sregs s = sregs();
  s.cs = to_kvm(state.cs);
  s.ds = to_kvm(state.ds);
  s.es = to_kvm(state.es);
  s.fs = to_kvm(state.fs);
  s.gs = to_kvm(state.gs);
  s.ss = to_kvm(state.ss);
  s.tr = to_kvm(state.tr);
  s.ldt = to_kvm(state.ldt);
  s.gdt.base = state.gdt_base;
  s.gdt.limit = state.gdt_limit;
  s.idt.base = 0;
  s.idt.limit = 0;
  s.cr0 = state.cr0;
  s.cr3 = state.cr3;
  s.cr4 = state.cr4;
  s.efer = state.efer;
  if (ioctl(fd_, KVM_SET_SREGS, &s) < 0) throw_errno("KVM_SET_SREGS");
  kvm_regs r{};
  r.rip = rip;
  r.rdi = rdi;
  r.rsi = rsi;
  r.rflags = 0x2;
  set_regs(r);
}

void KvmVcpu::make_runnable() {
  kvm_mp_state mp{KVM_MP_STATE_RUNNABLE};
  if (ioctl(fd_, KVM_SET_MP_STATE, &mp) < 0) throw_errno("KVM_SET_MP_STATE");
}

namespace {
// kvm_msrs ends in a flexible array: the header and one entry, laid out as the kernel reads them.
struct OneMsr {
  kvm_msrs header;
  kvm_msr_entry entry;
};
static_assert(offsetof(OneMsr, entry) == sizeof(kvm_msrs));
}  // namespace

void KvmVcpu::set_msr(uint32_t index, uint64_t value) {
  if (!try_set_msr(index, value))
    throw VmmError("KVM_SET_MSRS " + std::to_string(index) + " refused");
}

bool KvmVcpu::try_set_msr(uint32_t index, uint64_t value) {
  OneMsr msrs{};
  msrs.header.nmsrs = 1;
  msrs.entry.index = index;
  msrs.entry.data = value;
  return ioctl(fd_, KVM_SET_MSRS, &msrs) == 1;
}

uint64_t KvmVcpu::msr(uint32_t index) {
  OneMsr msrs{};
  msrs.header.nmsrs = 1;
  msrs.entry.index = index;
  if (ioctl(fd_, KVM_GET_MSRS, &msrs) != 1)
    throw VmmError("KVM_GET_MSRS " + std::to_string(index) + " refused");
  return msrs.entry.data;
}

void KvmVcpu::set_guest_debug(const kvm_guest_debug& debug) {
  if (ioctl(fd_, KVM_SET_GUEST_DEBUG, &debug) < 0) throw_errno("KVM_SET_GUEST_DEBUG");
}

kvm_debugregs KvmVcpu::debug_registers() const {
  kvm_debugregs d{};
  if (ioctl(fd_, KVM_GET_DEBUGREGS, &d) < 0) throw_errno("KVM_GET_DEBUGREGS");
  return d;
}

bool KvmVcpu::inject_debug_exception(uint64_t dr6) {
  kvm_vcpu_events events{};
  if (ioctl(fd_, KVM_GET_VCPU_EVENTS, &events) < 0) throw_errno("KVM_GET_VCPU_EVENTS");
  if (events.exception.injected || events.exception.pending) return false;
  // Without KVM_CAP_EXCEPTION_PAYLOAD an injected #DB leaves DR6 as it is: set it first.
  kvm_debugregs d = debug_registers();
  d.dr6 = dr6;
  d.flags = 0;
  if (ioctl(fd_, KVM_SET_DEBUGREGS, &d) < 0) throw_errno("KVM_SET_DEBUGREGS (DR6)");
  events.exception.injected = 1;
  events.exception.pending = 0;
  events.exception.nr = 1;
  events.exception.has_error_code = 0;
  events.exception.error_code = 0;
  if (ioctl(fd_, KVM_SET_VCPU_EVENTS, &events) < 0) throw_errno("KVM_SET_VCPU_EVENTS (#DB)");
  return true;
}

void KvmVcpu::set_rflags_bits(uint64_t bits) {
  if (synced_ && exit_regs_current_) {
    kvm_regs& copy = run_->s.regs.regs;
    if ((copy.rflags & bits) == bits) return;
    copy.rflags |= bits;
    run_->kvm_dirty_regs |= KVM_SYNC_X86_REGS;
    return;
  }
  kvm_regs r = regs();
  if ((r.rflags & bits) == bits) return;
  r.rflags |= bits;
  set_regs(r);
}

int KvmVcpu::run() {
  const int r = ioctl(fd_, KVM_RUN, 0);
  exit_regs_current_ = true;  // KVM stores the registers into kvm_run on every return
  if (r == 0) return 0;
  if (errno == EINTR || errno == EAGAIN) return -errno;
  throw_errno("KVM_RUN on vCPU " + std::to_string(index_));
}

kvm_regs KvmVcpu::regs() const {
  if (regs_dirty()) return run_->s.regs.regs;  // not yet loaded by KVM
  kvm_regs r{};
  if (ioctl(fd_, KVM_GET_REGS, &r) < 0) throw_errno("KVM_GET_REGS");
  return r;
}

void KvmVcpu::set_regs(const kvm_regs& r) {
  if (ioctl(fd_, KVM_SET_REGS, &r) < 0) throw_errno("KVM_SET_REGS");
  if (synced_) {  // the copy stays current (and a dirty one must not overwrite `r`)
    run_->s.regs.regs = r;
    run_->kvm_dirty_regs &= ~static_cast<uint64_t>(KVM_SYNC_X86_REGS);
  }
}

kvm_sregs KvmVcpu::sregs() const {
  kvm_sregs s{};
  if (ioctl(fd_, KVM_GET_SREGS, &s) < 0) throw_errno("KVM_GET_SREGS");
  return s;
}

uint32_t KvmVcpu::lapic_register(uint32_t offset) const {
  kvm_lapic_state state{};
  if (ioctl(fd_, KVM_GET_LAPIC, &state) < 0) throw_errno("KVM_GET_LAPIC");
  uint32_t value = 0;
  std::memcpy(&value, state.regs + offset, 4);
  return value;
}

bool KvmVcpu::interrupt_pending() const {
  kvm_lapic_state state{};
  if (ioctl(fd_, KVM_GET_LAPIC, &state) < 0) throw_errno("KVM_GET_LAPIC");
  constexpr uint32_t kIrr = 0x200;  // 8 registers of 32 vectors, 16 bytes apart
  for (uint32_t i = 0; i < 8; ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, state.regs + kIrr + 16 * i, 4);
    if (bits != 0) return true;
  }
  kvm_vcpu_events events{};
  if (ioctl(fd_, KVM_GET_VCPU_EVENTS, &events) < 0) throw_errno("KVM_GET_VCPU_EVENTS");
  return events.nmi.pending != 0;
}

bool KvmVcpu::event_in_flight() const {
  kvm_vcpu_events e{};
  if (ioctl(fd_, KVM_GET_VCPU_EVENTS, &e) < 0) throw_errno("KVM_GET_VCPU_EVENTS");
  return e.exception.injected || e.exception.pending || e.interrupt.injected || e.nmi.injected ||
         e.interrupt.shadow != 0;
}

void KvmVcpu::get_xsave(kvm_xsave& out) const {
  if (ioctl(fd_, KVM_GET_XSAVE, &out) < 0) throw_errno("KVM_GET_XSAVE");
}

void KvmVcpu::set_xsave(const kvm_xsave& state) {
  if (ioctl(fd_, KVM_SET_XSAVE, &state) < 0) throw_errno("KVM_SET_XSAVE");
}

void KvmVcpu::set_cr2(uint64_t value) {
  kvm_sregs s = sregs();  // fresh, not the exit copy: SET_SREGS writes every field back
  s.cr2 = value;
  write_sregs(s, "KVM_SET_SREGS (CR2)");
}

void KvmVcpu::write_sregs(kvm_sregs s, const char* what) {
  // TR's cached type: KVM_GET_SREGS on AMD always reports it busy (0xB, "the busy flag isn't
  // exposed"), whatever was loaded. The guest cannot read the cached type (STR gives the selector,
  // LAR reads the GDT) and long mode never consults it, but QEMU's TCG, which runs the nested
  // KVM host of DESIGN §4.8, checks I/O permissions only through a TR of type 9 exactly: a busy
  // TR written back made a Linux guest's `outl` after ioperm() fault with #GP (after a restore;
  // and after LWP's #PF trap set CR2 this way, deterministically with one vCPU). LTR leaves the
  // cached type 9 on that host, so 9 is what the guest had there.
  if (s.tr.type == 0xB) s.tr.type = 0x9;
  if (ioctl(fd_, KVM_SET_SREGS, &s) < 0) throw_errno(what);
}

bool KvmVcpu::inject_page_fault(uint64_t linear, uint32_t error_code) {
  kvm_vcpu_events events{};
  if (ioctl(fd_, KVM_GET_VCPU_EVENTS, &events) < 0) throw_errno("KVM_GET_VCPU_EVENTS");
  if (events.exception.injected || events.exception.pending) return false;
  // Without KVM_CAP_EXCEPTION_PAYLOAD (pmuvm does not enable it), KVM delivers an injected #PF
  // with the vCPU's CR2 as it is: set it first. `injected` makes KVM deliver the exception on the
  // next entry; the flags read above write the other event state back unchanged.
  set_cr2(linear);
  events.exception.injected = 1;
  events.exception.pending = 0;
  events.exception.nr = 14;
  events.exception.has_error_code = 1;
  events.exception.error_code = error_code;
  if (ioctl(fd_, KVM_SET_VCPU_EVENTS, &events) < 0) throw_errno("KVM_SET_VCPU_EVENTS (#PF)");
  return true;
}

void KvmVcpu::nmi() {
  if (ioctl(fd_, KVM_NMI, 0) < 0) throw_errno("KVM_NMI");
}

}  // namespace vmm
