// ExitHistory: the last kDepth exits, oldest first, numbered from the vCPU's first exit, each
// with what identifies it (port, MSR, DR6, MMIO address) and the registers at that exit.
#include "vmm/kvm/exit_history.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace vmm {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(ExitHistory, EmptyUntilTheFirstExit) { EXPECT_EQ(ExitHistory().describe(), ""); }

TEST(ExitHistory, EachExitKindNamesWhatItWasFor) {
  ExitHistory h;
  kvm_run run{};
  run.kvm_valid_regs = KVM_SYNC_X86_REGS | KVM_SYNC_X86_SREGS;  // KVM_CAP_SYNC_REGS in use
  kvm_regs& regs = run.s.regs.regs;
  kvm_sregs& sregs = run.s.regs.sregs;
  regs.rip = 0x400123;
  regs.rsp = 0x7ffffff0;
  regs.rflags = 0x346;
  sregs.cr3 = 0x61e000;
  sregs.cr2 = 0xdead000;
  sregs.ss.dpl = 3;
  run.exit_reason = KVM_EXIT_IO;
  run.io.port = 0x3f8;
  h.record(run);
  run.exit_reason = KVM_EXIT_X86_WRMSR;
  run.msr.index = 0xc0000106;
  h.record(run);
  run.exit_reason = KVM_EXIT_DEBUG;
  run.debug.arch.dr6 = 0xffff4ff0;
  h.record(run);
  run.exit_reason = KVM_EXIT_MMIO;
  run.mmio.phys_addr = 0xc0000000;
  h.record(run);
  run.exit_reason = KVM_EXIT_SHUTDOWN;
  h.record(run);
  const std::string tail =
      " cpl 3 rip=0x400123 rsp=0x7ffffff0 rflags=0x346 cr3=0x61e000 cr2=0xdead000";
  EXPECT_EQ(lines_of(h.describe()), (std::vector<std::string>{
                                        "  exit 0: io(0x3f8)" + tail,
                                        "  exit 1: wrmsr(0xc0000106)" + tail,
                                        "  exit 2: debug(0xffff4ff0)" + tail,
                                        "  exit 3: mmio(0xc0000000)" + tail,
                                        "  exit 4: shutdown(0)" + tail,
                                    }));
  EXPECT_NE(h.describe().back(), '\n');
}

TEST(ExitHistory, KeepsTheLastExitsOldestFirst) {
  ExitHistory h;
  kvm_run run{};
  run.kvm_valid_regs = KVM_SYNC_X86_REGS | KVM_SYNC_X86_SREGS;
  kvm_regs& regs = run.s.regs.regs;
  run.exit_reason = KVM_EXIT_HLT;
  const uint64_t total = ExitHistory::kDepth + 5;
  for (uint64_t i = 0; i < total; ++i) {
    regs.rip = 0x1000 + i;
    h.record(run);
  }
  const std::vector<std::string> lines = lines_of(h.describe());
  ASSERT_EQ(lines.size(), ExitHistory::kDepth);
  for (size_t k = 0; k < lines.size(); ++k) {
    const uint64_t i = total - ExitHistory::kDepth + k;
    std::ostringstream want;
    want << "  exit " << i << ": hlt(0) cpl 0 rip=0x" << std::hex << 0x1000 + i << " ";
    EXPECT_EQ(lines[k].rfind(want.str(), 0), 0u) << lines[k];
  }
}

// Without KVM_CAP_SYNC_REGS the history keeps the exits, not registers it would need an ioctl for.
TEST(ExitHistory, WithoutSyncedRegistersOnlyTheExitIsKept) {
  ExitHistory h;
  kvm_run run{};
  run.exit_reason = KVM_EXIT_IO;
  run.io.port = 0x510;
  run.s.regs.regs.rip = 0x1234;  // stale: KVM was not asked to sync
  h.record(run);
  EXPECT_EQ(h.describe(), "  exit 0: io(0x510) (registers not synced)");
}

}  // namespace
}  // namespace vmm
