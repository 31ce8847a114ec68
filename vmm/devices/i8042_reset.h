// The part of the PC keyboard controller (i8042, ports 0x60/0x64) a guest uses to reset the
// machine: command 0xFE written to port 0x64 pulses the CPU reset line. Linux's `reboot -f`
// without ACPI takes this path (native_machine_emergency_restart, BOOT_KBD), after polling the
// status port until the input buffer is empty — so the status reads 0 (nothing buffered, no
// keyboard behind it) rather than the 0xFF of an absent device, which would make it wait out every
// timeout first. No keyboard or mouse is modelled: the data port reads 0, other commands are
// ignored.
#pragma once

#include <cstdint>

namespace vmm {

class I8042Reset {
 public:
  static constexpr uint16_t kDataPort = 0x60, kCommandPort = 0x64;
  static constexpr uint8_t kPulseResetLine = 0xFE;

  bool owns(uint16_t port) const { return port == kDataPort || port == kCommandPort; }
  uint8_t read(uint16_t) const { return 0; }
  // True when the write asks for a CPU reset.
  bool write(uint16_t port, uint8_t value) const {
    return port == kCommandPort && value == kPulseResetLine;
  }
};

}  // namespace vmm
