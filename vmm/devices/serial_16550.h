// A polled 16550A UART at COM1 (I/O ports 0x3F8-0x3FF), enough for a guest console: bytes
// written to THR go to an output sink (pmuvm's stdout), the line status always reports an empty
// transmitter, the divisor latch and scratch register read back what was written, and no
// interrupts are raised (the bundled guest polls LSR). Receive is not modelled: LSR.DR stays 0.
#pragma once

#include <cstdint>
#include <functional>

namespace vmm {

class Serial16550 {
 public:
  static constexpr uint16_t kCom1Base = 0x3F8;
  static constexpr uint16_t kPortCount = 8;

  explicit Serial16550(std::function<void(char)> output, uint16_t base = kCom1Base)
      : output_(std::move(output)), base_(base) {}

  bool owns(uint16_t port) const { return port >= base_ && port < base_ + kPortCount; }

  // One-byte port accesses (wider accesses are split by the caller).
  uint8_t read(uint16_t port);
  void write(uint16_t port, uint8_t value);

 private:
  static constexpr uint8_t kLcrDlab = 0x80;
  static constexpr uint8_t kLsrThre = 0x20;  // transmit holding register empty
  static constexpr uint8_t kLsrTemt = 0x40;  // transmitter empty

  std::function<void(char)> output_;
  uint16_t base_;
  uint8_t ier_ = 0, lcr_ = 0x03, mcr_ = 0, scr_ = 0, fcr_ = 0;
  uint8_t dll_ = 0x01, dlm_ = 0;
};

}  // namespace vmm
