// The exit handler on fake kvm_run pages (no KVM): each exit reason does what
// vmm/machine/exit_handler.h says, and returns the action the run loop takes.
#include "vmm/machine/exit_handler.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "guest/abi/pmuvm_abi.h"
#include "vmm/devices/guest_console.h"
#include "vmm/devices/port_devices.h"
#include "tests/support/console_capture.h"

namespace vmm {
namespace {

class FakeVcpu : public ExitContext {
 public:
  std::map<uint32_t, uint64_t> msrs;  // what RDMSR/WRMSR may touch; anything else is a #GP
  int debug_exits = 0;
  bool reset_state = false;
  LogBudget budget{2};

  uint32_t index() const override { return 3; }
  std::optional<uint64_t> read_msr(uint32_t msr) override {
    auto it = msrs.find(msr);
    if (it == msrs.end()) return std::nullopt;
    return it->second;
  }
  bool write_msr(uint32_t msr, uint64_t value) override {
    auto it = msrs.find(msr);
    if (it == msrs.end()) return false;
    it->second = value;
    return true;
  }
  void debug_exit() override { ++debug_exits; }
  std::string registers() override { return "rip=0x1234"; }
  bool registers_are_reset_state() override { return reset_state; }
  std::string last_exits() override { return "\n(last exits)"; }
  LogBudget& mmio_warnings() override { return budget; }
};

// A vCPU's kvm_run page with the machine's devices behind it, as the run loop has them.
class ExitHandlerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(bus_.insert(Serial16550::kCom1Base, Serial16550::kPortCount, com1_).ok());
    ASSERT_TRUE(bus_.insert(I8042Reset::kCommandPort, 1, i8042_).ok());
    ASSERT_TRUE(bus_.insert(PMUVM_PORT_EXIT, 1, exit_port_).ok());
  }
  kvm_run& run() { return *reinterpret_cast<kvm_run*>(page_.data()); }
  // A port access of `count` elements of `size` bytes, with its data at offset 1024 of the page.
  uint8_t* io(uint16_t port, bool out, uint8_t size, uint32_t count) {
    run().exit_reason = KVM_EXIT_IO;
    run().io.direction = out ? KVM_EXIT_IO_OUT : KVM_EXIT_IO_IN;
    run().io.size = size;
    run().io.port = port;
    run().io.count = count;
    run().io.data_offset = 1024;
    return page_.data() + 1024;
  }
  RunEffect handle(const GuestKind& kind) { return handle_exit(run(), vcpu_, bus_, kind); }
  RunEffect handle() { return handle(*bundled_); }
  std::string console_text() { return out_.text(); }

  alignas(4096) std::array<uint8_t, 4096> page_{};
  FakeVcpu vcpu_;
  std::unique_ptr<GuestKind> bundled_ = restored_guest_kind(false);
  std::unique_ptr<GuestKind> linux_ = restored_guest_kind(true);
  ProgressPauses progress_{{"checkpoint"}, std::nullopt};
  const GuestKind* console_kind_ = bundled_.get();
  testing::ConsoleCapture out_;
  GuestConsole console_{progress_,
                        [this](std::string_view line) { return console_kind_->panic_reason(line); },
                        out_.file()};
  SerialPort com1_{console_};
  ResetPort i8042_;
  ExitPort exit_port_;
  IoBus bus_;
};

TEST_F(ExitHandlerTest, PortsWithoutADeviceReadAllOnesAndDropWrites) {
  uint8_t* data = io(0x80, false, 2, 1);
  data[0] = data[1] = 0x12;
  EXPECT_EQ(handle().kind, RunEffect::Kind::kResume);
  EXPECT_EQ(data[0], 0xFF);
  EXPECT_EQ(data[1], 0xFF);
  io(0x80, true, 1, 1);
  EXPECT_EQ(handle().kind, RunEffect::Kind::kResume);
  EXPECT_EQ(console_text(), "");
}

TEST_F(ExitHandlerTest, AStringAccessReachesTheDeviceOncePerElement) {
  uint8_t* data = io(Serial16550::kCom1Base, true, 1, 4);
  std::memcpy(data, "rep\n", 4);  // REP OUTSB to COM1's transmit register
  EXPECT_EQ(handle().kind, RunEffect::Kind::kResume);
  EXPECT_EQ(console_text(), "rep\n");
  // REP INSB of the line status register: every element read (THR empty, transmitter idle).
  data = io(Serial16550::kCom1Base + 5, false, 1, 3);
  std::memset(data, 0, 3);
  handle();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(data[i] & 0x60, 0x60) << i;
}

TEST_F(ExitHandlerTest, TheExitPortEndsTheRunWithItsLowByteAndTheRestOfAStringIsNotTaken) {
  uint8_t* data = io(PMUVM_PORT_EXIT, true, 4, 2);
  const uint32_t statuses[2] = {0x305, 7};
  std::memcpy(data, statuses, 8);
  const RunEffect a = handle();
  EXPECT_EQ(a.kind, RunEffect::Kind::kEndRun);
  EXPECT_EQ(a.status, 5);
  // A 1-byte OUT there means nothing.
  io(PMUVM_PORT_EXIT, true, 1, 1)[0] = 9;
  EXPECT_EQ(handle().kind, RunEffect::Kind::kResume);
}

TEST_F(ExitHandlerTest, AnI8042ResetEndsTheRunWithStatusZero) {
  io(I8042Reset::kCommandPort, true, 1, 1)[0] = 0xFE;
  const RunEffect a = handle();
  EXPECT_EQ(a.kind, RunEffect::Kind::kEndRun);
  EXPECT_EQ(a.status, 0);
}

TEST_F(ExitHandlerTest, AConsoleLineReachesItsPausePointAndALinuxPanicFails) {
  const std::string line = "at checkpoint\n";
  uint8_t* data = io(Serial16550::kCom1Base, true, 1, static_cast<uint32_t>(line.size()));
  std::memcpy(data, line.data(), line.size());
  const RunEffect pause = handle();
  EXPECT_EQ(pause.kind, RunEffect::Kind::kPause);
  EXPECT_NE(pause.text.find("checkpoint"), std::string::npos);

  const std::string panic = "---[ end Kernel panic - not syncing: Attempted to kill init! ]---\n";
  auto send_panic = [&] {
    uint8_t* d = io(Serial16550::kCom1Base, true, 1, static_cast<uint32_t>(panic.size()));
    std::memcpy(d, panic.data(), panic.size());
  };
  send_panic();
  EXPECT_EQ(handle(*bundled_).kind, RunEffect::Kind::kResume);  // the bundled kernel's text
  console_kind_ = linux_.get();
  send_panic();
  const RunEffect fail = handle(*linux_);
  EXPECT_EQ(fail.kind, RunEffect::Kind::kFail);
  EXPECT_EQ(fail.text, "Linux guest kernel panic: Attempted to kill init!");
}

TEST_F(ExitHandlerTest, MsrAccessesReachTheVcpuAndARefusedOneIsAGeneralProtectionFault) {
  vcpu_.msrs[0xC0000105] = 0x8000000F;
  run().exit_reason = KVM_EXIT_X86_RDMSR;
  run().msr.index = 0xC0000105;
  EXPECT_EQ(handle().kind, RunEffect::Kind::kResume);
  EXPECT_EQ(run().msr.error, 0);
  EXPECT_EQ(run().msr.data, 0x8000000Fu);

  run().exit_reason = KVM_EXIT_X86_WRMSR;
  run().msr.data = 0x1234;
  EXPECT_EQ(handle().kind, RunEffect::Kind::kResume);
  EXPECT_EQ(run().msr.error, 0);
  EXPECT_EQ(vcpu_.msrs[0xC0000105], 0x1234u);

  for (uint32_t reason : {KVM_EXIT_X86_RDMSR, KVM_EXIT_X86_WRMSR}) {
    run().exit_reason = reason;
    run().msr.index = 0x301;
    run().msr.error = 0;
    EXPECT_EQ(handle().kind, RunEffect::Kind::kResume);
    EXPECT_EQ(run().msr.error, 1) << reason;
  }
}

TEST_F(ExitHandlerTest, MmioWithoutADeviceReadsAllOnesWhateverTheGuestDoes) {
  run().exit_reason = KVM_EXIT_MMIO;
  run().mmio.is_write = 0;
  run().mmio.phys_addr = 0xFEC00000;
  for (int i = 0; i < 10; ++i) {
    std::memset(run().mmio.data, 0, sizeof run().mmio.data);
    EXPECT_EQ(handle().kind, RunEffect::Kind::kResume);
    for (uint8_t b : run().mmio.data) EXPECT_EQ(b, 0xFF);
  }
  EXPECT_EQ(vcpu_.budget.seen(), 10u);  // counted; logged twice
}

TEST_F(ExitHandlerTest, ADebugExitGoesToTheStepper) {
  run().exit_reason = KVM_EXIT_DEBUG;
  EXPECT_EQ(handle().kind, RunEffect::Kind::kResume);
  EXPECT_EQ(vcpu_.debug_exits, 1);
}

TEST_F(ExitHandlerTest, ATripleFaultIsACrashOfTheBundledKernelAndALinuxReboot) {
  run().exit_reason = KVM_EXIT_SHUTDOWN;
  const RunEffect crash = handle(*bundled_);
  EXPECT_EQ(crash.kind, RunEffect::Kind::kFail);
  EXPECT_EQ(crash.text, "guest triple fault on vCPU 3: rip=0x1234\n(last exits)");
  vcpu_.reset_state = true;
  EXPECT_NE(handle(*bundled_).text.find("registers lost"), std::string::npos);
  const RunEffect reboot = handle(*linux_);
  EXPECT_EQ(reboot.kind, RunEffect::Kind::kEndRun);
  EXPECT_EQ(reboot.status, 0);
}

TEST_F(ExitHandlerTest, FatalExitsFailWithWhatIsKnown) {
  run().exit_reason = KVM_EXIT_FAIL_ENTRY;
  run().fail_entry.hardware_entry_failure_reason = 0x21;
  RunEffect a = handle();
  EXPECT_EQ(a.kind, RunEffect::Kind::kFail);
  EXPECT_EQ(a.text, "KVM could not enter vCPU 3 (hardware reason 33): rip=0x1234\n(last exits)");
  run().exit_reason = KVM_EXIT_INTERNAL_ERROR;
  run().internal.suberror = 1;
  a = handle();
  EXPECT_EQ(a.kind, RunEffect::Kind::kFail);
  EXPECT_EQ(a.text, "KVM internal error 1 on vCPU 3: rip=0x1234\n(last exits)");
  run().exit_reason = 999;
  EXPECT_EQ(handle().text, "unexpected KVM exit reason 999 on vCPU 3");
  for (uint32_t harmless : {KVM_EXIT_INTR, KVM_EXIT_HLT}) {
    run().exit_reason = harmless;
    EXPECT_EQ(handle().kind, RunEffect::Kind::kResume);
  }
}

}  // namespace
}  // namespace vmm
