// The PC's and pmuvm's port devices as the I/O bus sees them (vmm/devices/io_bus.h): each wraps
// its model with the lock that model needs, and turns what an access did into an RunEffect.
//   COM1 (0x3F8-0x3FF)      Serial16550, printing into the GuestConsole
//   CMOS (0x70-0x71)        CmosRtc
//   i8042 (0x60, 0x64)      I8042Reset: command 0xFE ends the run with status 0 (a reset)
//   exit port (0x510)       a 4-byte OUT ends the run with the low byte of its value
//   block console (0x514)   a 4-byte OUT names a console block in guest RAM (pmuvm_abi.h)
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>

#include "vmm/devices/cmos_rtc.h"
#include "vmm/devices/guest_console.h"
#include "vmm/devices/i8042_reset.h"
#include "vmm/devices/io_bus.h"
#include "vmm/devices/serial_16550.h"
#include "vmm/memory/guest_ram.h"

namespace vmm {

class SerialPort : public BusDevice {
 public:
  explicit SerialPort(GuestConsole& console);
  RunEffect access(uint16_t port, bool write, std::span<uint8_t> data) override;
  // Wires COM1's interrupt line (IRQ4) to the VM's interrupt controller (Linux guests).
  void set_irq_callback(std::function<void(bool level)> irq);

  static constexpr uint16_t kStateVersion = Serial16550::kStateVersion;
  template <class Archive>
  void archive(Archive& a) {
    std::lock_guard<std::mutex> g(lock_);
    serial_.archive(a);
  }

 private:
  std::mutex lock_;
  GuestConsole& console_;
  RunEffect printed_;  // what the bytes the current access printed asked for
  Serial16550 serial_;
};

class CmosPort : public BusDevice {
 public:
  RunEffect access(uint16_t port, bool write, std::span<uint8_t> data) override;

  static constexpr uint16_t kStateVersion = CmosRtc::kStateVersion;
  template <class Archive>
  void archive(Archive& a) {
    std::lock_guard<std::mutex> g(lock_);
    rtc_.archive(a);
  }

 private:
  std::mutex lock_;
  CmosRtc rtc_;
};

// No state: no lock.
class ResetPort : public BusDevice {
 public:
  RunEffect access(uint16_t port, bool write, std::span<uint8_t> data) override;
};

class ExitPort : public BusDevice {
 public:
  RunEffect access(uint16_t port, bool write, std::span<uint8_t> data) override;
};

// Reads the block from guest RAM (whose accesses are safe from any thread) and prints it; a block
// outside RAM or longer than PMUVM_CONSOLE_BLOCK_BYTES is dropped.
class BlockConsolePort : public BusDevice {
 public:
  BlockConsolePort(const GuestRam& ram, GuestConsole& console) : ram_(ram), console_(console) {}
  RunEffect access(uint16_t port, bool write, std::span<uint8_t> data) override;

 private:
  const GuestRam& ram_;
  GuestConsole& console_;
};

}  // namespace vmm
