#include "vmm/devices/serial_16550.h"

namespace vmm {

uint8_t Serial16550::read(uint16_t port) {
  const bool dlab = lcr_ & kLcrDlab;
  switch (port - base_) {
    case 0: return dlab ? dll_ : 0;           // RBR: nothing received
    case 1: return dlab ? dlm_ : ier_;
    case 2: return (fcr_ & 1) ? 0xC1 : 0x01;  // IIR: no interrupt pending; FIFOs as enabled
    case 3: return lcr_;
    case 4: return mcr_;
    case 5: return kLsrThre | kLsrTemt;       // LSR: always ready to transmit
    case 6: return (mcr_ & 0x10) ? 0xF0 : 0xB0;  // MSR: loopback echoes, else CTS/DSR/DCD
    case 7: return scr_;
  }
  return 0xFF;
}

void Serial16550::write(uint16_t port, uint8_t value) {
  const bool dlab = lcr_ & kLcrDlab;
  switch (port - base_) {
    case 0:
      if (dlab) dll_ = value;
      else if (!(mcr_ & 0x10)) output_(static_cast<char>(value));  // loopback keeps it inside
      return;
    case 1:
      if (dlab) dlm_ = value;
      else ier_ = value & 0x0F;
      return;
    case 2: fcr_ = value; return;
    case 3: lcr_ = value; return;
    case 4: mcr_ = value & 0x1F; return;
    case 7: scr_ = value; return;
    default: return;  // LSR/MSR are read-only
  }
}

}  // namespace vmm
