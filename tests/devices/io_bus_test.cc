// The port I/O bus and its devices: an access reaches the one device whose range holds the port,
// nothing else; where no device is, reads float high and writes vanish; ranges never overlap;
// the console and the exit/reset ports turn what the guest did into the effect the run loop
// acts on.
#include "vmm/devices/io_bus.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "guest/abi/pmuvm_abi.h"
#include "vmm/devices/guest_console.h"
#include "vmm/devices/port_devices.h"
#include "tests/support/console_capture.h"
#include "vmm/memory/guest_ram.h"

namespace vmm {
namespace {

// Remembers every access it gets.
struct RecordingDevice : BusDevice {
  std::vector<std::pair<uint16_t, bool>> accesses;
  RunEffect access(uint16_t port, bool write, std::span<uint8_t> data) override {
    accesses.emplace_back(port, write);
    if (!write) data[0] = 0x42;
    return {};
  }
};

TEST(IoBus, AnAccessReachesTheDeviceWhoseRangeHoldsThePort) {
  IoBus bus;
  RecordingDevice a, b;
  ASSERT_TRUE(bus.insert(0x3F8, 8, a).ok());
  ASSERT_TRUE(bus.insert(0x70, 2, b).ok());
  uint8_t byte = 0;
  bus.access(0x3FF, false, std::span(&byte, 1));
  EXPECT_EQ(byte, 0x42);
  bus.access(0x71, true, std::span(&byte, 1));
  ASSERT_EQ(a.accesses.size(), 1u);
  EXPECT_EQ(a.accesses[0], std::make_pair(uint16_t{0x3FF}, false));
  ASSERT_EQ(b.accesses.size(), 1u);
  EXPECT_EQ(b.accesses[0], std::make_pair(uint16_t{0x71}, true));
  EXPECT_EQ(bus.find(0x3F7), nullptr);
  EXPECT_EQ(bus.find(0x400), nullptr);
  EXPECT_EQ(bus.find(0x72), nullptr);
}

TEST(IoBus, WithNoDeviceReadsFloatHighAndWritesAreDropped) {
  IoBus bus;
  RecordingDevice a;
  ASSERT_TRUE(bus.insert(0x60, 1, a).ok());
  std::array<uint8_t, 4> data{1, 2, 3, 4};
  EXPECT_EQ(bus.access(0x80, false, data).kind, RunEffect::Kind::kResume);
  EXPECT_EQ(data, (std::array<uint8_t, 4>{0xFF, 0xFF, 0xFF, 0xFF}));
  EXPECT_EQ(bus.access(0x80, true, data).kind, RunEffect::Kind::kResume);
  EXPECT_TRUE(a.accesses.empty());
}

TEST(IoBus, RefusesEmptyWrappingAndOverlappingRanges) {
  IoBus bus;
  RecordingDevice d;
  ASSERT_TRUE(bus.insert(0x100, 0x10, d).ok());
  EXPECT_FALSE(bus.insert(0x200, 0, d).ok());
  EXPECT_FALSE(bus.insert(0xFFF0, 0x11, d).ok());
  EXPECT_TRUE(bus.insert(0xFFF0, 0x10, d).ok());  // up to port 0xFFFF
  EXPECT_FALSE(bus.insert(0x10F, 1, d).ok());     // the last port of the first range
  EXPECT_FALSE(bus.insert(0xF0, 0x11, d).ok());   // reaches into it from below
  EXPECT_FALSE(bus.insert(0x100, 0x10, d).ok());
  EXPECT_EQ(bus.insert(0x108, 2, d).error().kind, Error::Kind::kVmm);
  EXPECT_TRUE(bus.insert(0xF0, 0x10, d).ok());  // right below it
  EXPECT_TRUE(bus.insert(0x110, 1, d).ok());    // right above it
}

using testing::ConsoleCapture;

TEST(GuestConsole, ALineWithAPauseTextPausesOnceAndAPanicLineFails) {
  ConsoleCapture out;
  ProgressPauses progress({"ready"}, std::nullopt);
  GuestConsole console(
      progress,
      [](std::string_view line) -> std::optional<std::string> {
        if (line == "oops") return "panicked";
        return std::nullopt;
      },
      out.file());
  EXPECT_EQ(console.print("rea").kind, RunEffect::Kind::kResume);
  const RunEffect pause = console.print("dy\n");
  EXPECT_EQ(pause.kind, RunEffect::Kind::kPause);
  EXPECT_NE(pause.text.find("ready"), std::string::npos);
  EXPECT_EQ(console.print("ready\n").kind, RunEffect::Kind::kResume);  // each point pauses once
  const RunEffect panic = console.print("oops\nafter");
  EXPECT_EQ(panic.kind, RunEffect::Kind::kFail);
  EXPECT_EQ(panic.text, "panicked");
  EXPECT_EQ(console.line(), "after");
  EXPECT_EQ(out.text(), "ready\nready\noops\nafter");
}

TEST(GuestConsole, KeepsAtMostTheLineLimitAndRefusesACraftedLine) {
  ConsoleCapture out;
  ProgressPauses progress;
  GuestConsole console(progress, nullptr, out.file());
  console.print(std::string(GuestConsole::kLineLimit + 10, 'x'));
  EXPECT_EQ(console.line().size(), GuestConsole::kLineLimit);
  EXPECT_FALSE(console.restore_line(std::string(GuestConsole::kLineLimit + 1, 'y')).ok());
  EXPECT_FALSE(console.restore_line("two\nlines").ok());
  EXPECT_TRUE(console.restore_line("partial").ok());
  EXPECT_EQ(console.line(), "partial");
}

TEST(PortDevices, TheExitPortTakesOnlyAFourByteOut) {
  ExitPort port;
  std::array<uint8_t, 4> data{0x2A, 0x01, 0, 0};
  const RunEffect out = port.access(PMUVM_PORT_EXIT, true, data);
  EXPECT_EQ(out.kind, RunEffect::Kind::kEndRun);
  EXPECT_EQ(out.status, 0x2A);  // the low byte of 0x12A
  EXPECT_EQ(port.access(PMUVM_PORT_EXIT, true, std::span(data).first(1)).kind,
            RunEffect::Kind::kResume);
  EXPECT_EQ(port.access(PMUVM_PORT_EXIT, false, data).kind, RunEffect::Kind::kResume);
  EXPECT_EQ(data[0], 0xFF);
}

TEST(PortDevices, TheI8042ResetsOnlyOnCommandFE) {
  ResetPort port;
  uint8_t value = I8042Reset::kPulseResetLine;
  EXPECT_EQ(port.access(I8042Reset::kDataPort, true, std::span(&value, 1)).kind,
            RunEffect::Kind::kResume);
  value = 0xFD;
  EXPECT_EQ(port.access(I8042Reset::kCommandPort, true, std::span(&value, 1)).kind,
            RunEffect::Kind::kResume);
  value = I8042Reset::kPulseResetLine;
  const RunEffect reset = port.access(I8042Reset::kCommandPort, true, std::span(&value, 1));
  EXPECT_EQ(reset.kind, RunEffect::Kind::kEndRun);
  EXPECT_EQ(reset.status, 0);
  EXPECT_FALSE(reset.text.empty());  // said in the log
  value = 0xAA;
  port.access(I8042Reset::kCommandPort, false, std::span(&value, 1));
  EXPECT_EQ(value, 0);  // status: nothing buffered
}

TEST(PortDevices, TheBlockConsolePrintsABlockWhollyInRamAndDropsOthers) {
  ConsoleCapture out;
  ProgressPauses progress;
  GuestConsole console(progress, nullptr, out.file());
  GuestRam ram(1 << 20);
  BlockConsolePort port(ram, console);
  const std::string text = "hello\n";
  const uint32_t length = static_cast<uint32_t>(text.size());
  ASSERT_TRUE(ram.write(0x1000, std::as_bytes(std::span(&length, 1))));
  ASSERT_TRUE(ram.write(0x1004, std::as_bytes(std::span(text))));
  const uint32_t too_long = PMUVM_CONSOLE_BLOCK_BYTES + 1;
  ASSERT_TRUE(ram.write(0x2000, std::as_bytes(std::span(&too_long, 1))));
  for (uint32_t gpa : {0x1000u, 0x2000u, (1u << 20) - 2, 0xFFFFFFFFu}) {
    std::array<uint8_t, 4> data;
    std::memcpy(data.data(), &gpa, 4);
    EXPECT_EQ(port.access(PMUVM_PORT_CONSOLE, true, data).kind, RunEffect::Kind::kResume);
  }
  EXPECT_EQ(out.text(), "hello\n");
}

TEST(PortDevices, SerialOutputFromManyThreadsLosesNoByte) {
  ConsoleCapture out;
  ProgressPauses progress;
  GuestConsole console(progress, nullptr, out.file());
  SerialPort com1(console);
  IoBus bus;
  ASSERT_TRUE(bus.insert(Serial16550::kCom1Base, Serial16550::kPortCount, com1).ok());
  std::vector<std::thread> threads;
  for (char letter : {'a', 'b', 'c', 'd'})
    threads.emplace_back([&bus, letter] {
      for (int i = 0; i < 1000; ++i) {
        uint8_t c = static_cast<uint8_t>(letter);
        bus.access(Serial16550::kCom1Base, true, std::span(&c, 1));
      }
    });
  for (std::thread& t : threads) t.join();
  std::string text = out.text();
  for (char letter : {'a', 'b', 'c', 'd'})
    EXPECT_EQ(std::count(text.begin(), text.end(), letter), 1000) << letter;
  EXPECT_EQ(text.size(), 4000u);
}

}  // namespace
}  // namespace vmm
