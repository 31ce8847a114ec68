#include "vmm/devices/serial_16550.h"

namespace vmm {

unsigned Serial16550::rx_trigger() const {
  static constexpr unsigned kLevels[4] = {1, 4, 8, 14};
  return kLevels[fcr_ >> 6];
}

uint8_t Serial16550::interrupt_id() const {
  if ((ier_ & kIerRlsi) && (lsr_errors_ & kLsrErrors)) return kIirRlsi;
  if ((ier_ & kIerRdi) && rx_count_ > 0) {
    if (!fifo_enabled() || rx_count_ >= rx_trigger()) return kIirRdi;
    return kIirRxTimeout;  // below the trigger level; no time base, so the timeout is immediate
  }
  if ((ier_ & kIerThri) && thr_ipending_) return kIirThri;
  if ((ier_ & kIerMsi) && (msr_delta_ & 0x0F)) return kIirMsi;
  return kIirNoInt;
}

uint8_t Serial16550::modem_inputs() const {
  if (!(mcr_ & kMcrLoop)) return kMsrExternal;
  uint8_t in = 0;
  if (mcr_ & kMcrDtr) in |= kMsrDsr;
  if (mcr_ & kMcrRts) in |= kMsrCts;
  if (mcr_ & kMcrOut1) in |= kMsrRi;
  if (mcr_ & kMcrOut2) in |= kMsrDcd;
  return in;
}

void Serial16550::set_mcr(uint8_t value) {
  const uint8_t before = modem_inputs();
  mcr_ = value & 0x1F;
  const uint8_t after = modem_inputs();
  const uint8_t changed = before ^ after;
  if (changed & kMsrCts) msr_delta_ |= 0x01;                       // DCTS
  if (changed & kMsrDsr) msr_delta_ |= 0x02;                       // DDSR
  if ((before & kMsrRi) && !(after & kMsrRi)) msr_delta_ |= 0x04;  // TERI: trailing edge
  if (changed & kMsrDcd) msr_delta_ |= 0x08;                       // DDCD
}

void Serial16550::receive(uint8_t byte) {
  const unsigned capacity = fifo_enabled() ? kFifoSize : 1;
  if (rx_count_ < capacity) {
    rx_[(rx_head_ + rx_count_) % kFifoSize] = byte;
    ++rx_count_;
    return;
  }
  lsr_errors_ |= kLsrOe;
  if (!fifo_enabled()) rx_[rx_head_] = byte;  // 16450 mode: the new byte overwrites RBR
}

void Serial16550::update_irq() {
  const bool level = interrupt_id() != kIirNoInt && (mcr_ & kMcrOut2) && !(mcr_ & kMcrLoop);
  if (level == irq_level_) return;
  irq_level_ = level;
  if (irq_) irq_(level);
}

void Serial16550::set_irq_callback(std::function<void(bool level)> irq) {
  irq_ = std::move(irq);
  if (irq_ && irq_level_) irq_(true);
}

uint8_t Serial16550::read(uint16_t port) {
  const bool dlab = lcr_ & kLcrDlab;
  uint8_t value = 0xFF;
  switch (port - base_) {
    case 0:  // RBR / DLL
      if (dlab) return dll_;
      if (rx_count_ > 0) {
        rbr_ = rx_[rx_head_];
        rx_head_ = (rx_head_ + 1) % kFifoSize;
        --rx_count_;
      }
      value = rbr_;
      break;
    case 1:  // IER / DLM
      return dlab ? dlm_ : ier_;
    case 2: {  // IIR (whatever DLAB says)
      const uint8_t id = interrupt_id();
      if (id == kIirThri) thr_ipending_ = false;  // reading IIR acknowledges THRE
      value = id | (fifo_enabled() ? kIirFifoBits : 0);
      break;
    }
    case 3: return lcr_;
    case 4: return mcr_;
    case 5:  // LSR: always ready to transmit; reading it clears the error bits
      value = kLsrThre | kLsrTemt | lsr_errors_ | (rx_count_ > 0 ? kLsrDr : 0);
      lsr_errors_ = 0;
      break;
    case 6:  // MSR: reading it clears the delta bits
      value = modem_inputs() | msr_delta_;
      msr_delta_ = 0;
      break;
    case 7: return scr_;
  }
  update_irq();
  return value;
}

void Serial16550::write(uint16_t port, uint8_t value) {
  const bool dlab = lcr_ & kLcrDlab;
  switch (port - base_) {
    case 0:  // THR / DLL
      if (dlab) {
        dll_ = value;
        return;
      }
      if (mcr_ & kMcrLoop)
        receive(value);  // loopback keeps it inside
      else if (output_)
        output_(static_cast<char>(value));
      thr_ipending_ = (ier_ & kIerThri) != 0;  // sent at once: THR is empty again
      break;
    case 1:  // IER / DLM
      if (dlab) {
        dlm_ = value;
        return;
      }
      // THRI 0 -> 1 raises THRE at once (THR is always empty); 1 -> 0 drops it.
      if ((value ^ ier_) & kIerThri) thr_ipending_ = (value & kIerThri) != 0;
      ier_ = value & 0x0F;
      break;
    case 2: {  // FCR (whatever DLAB says)
      const bool was_enabled = fifo_enabled();
      if (!(value & kFcrEnable)) {
        fcr_ &= ~kFcrEnable;  // the other bits are only programmed together with bit 0
      } else {
        fcr_ = value & kFcrWritable;
      }
      if (was_enabled != fifo_enabled() || (fifo_enabled() && (value & kFcrClearRx))) clear_rx();
      break;  // transmit FIFO: always empty, nothing to clear
    }
    case 3: lcr_ = value; return;
    case 4: set_mcr(value); break;
    case 7: scr_ = value; return;
    default: return;  // LSR/MSR are read-only (factory test writes are ignored)
  }
  update_irq();
}

}  // namespace vmm
