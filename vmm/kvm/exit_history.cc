#include "vmm/kvm/exit_history.h"

#include <cinttypes>
#include <cstdio>

namespace vmm {
namespace {

const char* reason_name(uint32_t reason) {
  switch (reason) {
    case KVM_EXIT_IO: return "io";
    case KVM_EXIT_MMIO: return "mmio";
    case KVM_EXIT_DEBUG: return "debug";
    case KVM_EXIT_HLT: return "hlt";
    case KVM_EXIT_X86_RDMSR: return "rdmsr";
    case KVM_EXIT_X86_WRMSR: return "wrmsr";
    case KVM_EXIT_INTR: return "intr";
    case KVM_EXIT_SHUTDOWN: return "shutdown";
    case KVM_EXIT_FAIL_ENTRY: return "fail-entry";
    case KVM_EXIT_INTERNAL_ERROR: return "internal-error";
    default: return "other";
  }
}

uint64_t detail_of(const kvm_run& run) {
  switch (run.exit_reason) {
    case KVM_EXIT_IO: return run.io.port;
    case KVM_EXIT_MMIO: return run.mmio.phys_addr;
    case KVM_EXIT_DEBUG: return run.debug.arch.dr6;
    case KVM_EXIT_X86_RDMSR:
    case KVM_EXIT_X86_WRMSR: return run.msr.index;
    default: return 0;
  }
}

}  // namespace

void ExitHistory::record(const kvm_run& run) {
  constexpr uint64_t kSynced = KVM_SYNC_X86_REGS | KVM_SYNC_X86_SREGS;
  Exit& e = exits_[count_++ % kDepth];
  e = Exit{run.exit_reason, detail_of(run)};
  if ((run.kvm_valid_regs & kSynced) != kSynced) return;
  const kvm_regs& r = run.s.regs.regs;
  const kvm_sregs& s = run.s.regs.sregs;
  e.registers = true;
  e.rip = r.rip, e.rsp = r.rsp, e.rflags = r.rflags;
  e.cr3 = s.cr3, e.cr2 = s.cr2, e.cpl = s.ss.dpl;
}

std::string ExitHistory::describe() const {
  std::string out;
  const uint64_t first = count_ > kDepth ? count_ - kDepth : 0;
  for (uint64_t i = first; i < count_; ++i) {
    const Exit& e = exits_[i % kDepth];
    char line[200];
    if (e.registers)
      std::snprintf(line, sizeof line,
                    "  exit %" PRIu64 ": %s(%#" PRIx64 ") cpl %u rip=%#" PRIx64 " rsp=%#" PRIx64
                    " rflags=%#" PRIx64 " cr3=%#" PRIx64 " cr2=%#" PRIx64,
                    i, reason_name(e.reason), e.detail, e.cpl, e.rip, e.rsp, e.rflags, e.cr3,
                    e.cr2);
    else
      std::snprintf(line, sizeof line,
                    "  exit %" PRIu64 ": %s(%#" PRIx64 ") (registers not synced)", i,
                    reason_name(e.reason), e.detail);
    if (!out.empty()) out += '\n';
    out += line;
  }
  return out;
}

}  // namespace vmm
