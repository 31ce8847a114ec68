// A 16550A UART at COM1 (I/O ports 0x3F8-0x3FF), modelled register by register so that both a
// polled console (the bundled guest) and Linux's 8250 driver (autoconfig() detects "16550A",
// serial8250_startup() finds no UART_BUG_THRE / UART_BUG_TXEN, ttyS0 works as console) see a
// real chip.
//
// What is modelled:
//  * Transmit is instantaneous: a byte written to THR (DLAB=0) goes to the output sink at once,
//    so LSR always reports THRE|TEMT (0x60) and the THRE interrupt re-arms right after each
//    write. In loopback (MCR bit 4) the byte does not leave the UART: it lands in the receiver.
//  * Receive: nothing arrives from outside (no input is connected), so LSR.DR is 0 unless the
//    guest loops bytes back. The receiver holds 1 byte (FIFOs off) or 16 (FIFOs on, FCR bit 0);
//    an overflow sets LSR.OE (FIFO: the new byte is lost; 16450 mode: it overwrites RBR).
//  * IER bits 3:0 (bits 7:4 read 0), IIR with the 16550A's priority order (line status 0x06 >
//    received data 0x04 / character timeout 0x0C > THRE 0x02 > modem status 0x00; 0x01 = none)
//    and FIFO bits 7:6 = 11 when FIFOs are enabled. IIR bits 5:4 are always 0 (no 64-byte FIFO,
//    no EFR), so Linux does not mistake the chip for a 16750, 16650 or NS16550A. There is no
//    time base, so the character timeout (0x0C) is reported as soon as the FIFO holds fewer
//    bytes than the trigger level.
//  * The THRE interrupt: pending when THR becomes empty (after every THR write) or when IER.THRI
//    goes 0 -> 1 (THR is always empty here); cleared by reading IIR while it is the reported
//    source, by writing THR (then re-armed at once) or by clearing IER.THRI.
//  * FCR is write-only (same port as IIR, independent of DLAB); bits other than bit 0 are only
//    programmed when bit 0 is written as 1; toggling bit 0 or writing bit 1 clears the receiver.
//  * MCR bits 4:0 (bits 7:5 read 0). MSR: outside loopback the modem lines read CTS|DSR|DCD
//    (a null-modem console cable, RI inactive); in loopback DTR->DSR, RTS->CTS, OUT1->RI,
//    OUT2->DCD. Delta bits (DCTS, DDSR, TERI on RI 1->0, DDCD) latch changes and clear on read.
//  * Divisor latch (DLL/DLM with LCR.DLAB) and scratch register read back what was written.
//  * Initial state is what PC firmware leaves: LCR 0x03 (8N1), divisor 1 (115200 baud), the rest
//    at its hardware reset value.
//
// Interrupt line (IRQ4 on a PC): asserted while an enabled interrupt is pending, gated as on PC
// boards by MCR.OUT2 (the line is off without OUT2 and in loopback, where OUT2 is looped back
// internally). The line is reported through an optional callback with its new level, called
// only on changes, from inside read()/write() (so under whatever lock the caller holds). Without
// a callback the model behaves the same and simply nobody listens.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "pmu/state_archive.h"

namespace vmm {

class Serial16550 {
 public:
  static constexpr uint16_t kCom1Base = 0x3F8;
  static constexpr uint16_t kPortCount = 8;
  static constexpr unsigned kCom1Irq = 4;
  static constexpr unsigned kFifoSize = 16;

  explicit Serial16550(std::function<void(char)> output, uint16_t base = kCom1Base,
                       std::function<void(bool level)> irq = {})
      : output_(std::move(output)), irq_(std::move(irq)), base_(base) {}

  bool owns(uint16_t port) const { return port >= base_ && port < base_ + kPortCount; }

  // One-byte port accesses (wider accesses are split by the caller).
  uint8_t read(uint16_t port);
  void write(uint16_t port, uint8_t value);

  // Wires the interrupt line (e.g. to KVM_IRQ_LINE on IRQ4). If the line is already asserted it
  // is reported at once.
  void set_irq_callback(std::function<void(bool level)> irq);
  // The current level of the interrupt line (after OUT2/loopback gating).
  bool irq_level() const { return irq_level_; }

  // Snapshot / migration: the registers and the receive FIFO (the IRQ line level is part of it;
  // the in-kernel PIC/IOAPIC state that saw it travels with the irqchip).
  // The version of what archive() saves: bump it with any change to that (snapshot sections,
  // vmm/snapshot/state_sections.h).
  static constexpr uint16_t kStateVersion = 1;
  template <class Archive>
  void archive(Archive& a) {
    a(ier_, lcr_, mcr_, scr_, fcr_, dll_, dlm_, lsr_errors_, msr_delta_, thr_ipending_, irq_level_,
      rx_, rx_head_, rx_count_, rbr_);
    if constexpr (Archive::kLoading) {
      // The next received byte goes to rx_[(rx_head_ + rx_count_) % kFifoSize]: both in range.
      if (rx_head_ >= kFifoSize || rx_count_ > kFifoSize)
        throw pmu::StateFormatError("16550 state: receive FIFO head " + std::to_string(rx_head_) +
                                    ", count " + std::to_string(rx_count_) + " (16 bytes)");
    }
  }

 private:
  // Register bits (names as in Linux's include/uapi/linux/serial_reg.h).
  static constexpr uint8_t kIerRdi = 0x01, kIerThri = 0x02, kIerRlsi = 0x04, kIerMsi = 0x08;
  static constexpr uint8_t kIirNoInt = 0x01, kIirFifoBits = 0xC0;
  static constexpr uint8_t kIirMsi = 0x00, kIirThri = 0x02, kIirRdi = 0x04, kIirRlsi = 0x06,
                           kIirRxTimeout = 0x0C;
  static constexpr uint8_t kFcrEnable = 0x01, kFcrClearRx = 0x02, kFcrWritable = 0xC9;
  static constexpr uint8_t kLcrDlab = 0x80;
  static constexpr uint8_t kMcrDtr = 0x01, kMcrRts = 0x02, kMcrOut1 = 0x04, kMcrOut2 = 0x08,
                           kMcrLoop = 0x10;
  static constexpr uint8_t kLsrDr = 0x01, kLsrOe = 0x02, kLsrErrors = 0x1E;
  static constexpr uint8_t kLsrThre = 0x20;  // transmit holding register empty
  static constexpr uint8_t kLsrTemt = 0x40;  // transmitter empty
  static constexpr uint8_t kMsrCts = 0x10, kMsrDsr = 0x20, kMsrRi = 0x40, kMsrDcd = 0x80;
  static constexpr uint8_t kMsrExternal = kMsrCts | kMsrDsr | kMsrDcd;  // lines outside loopback

  bool fifo_enabled() const { return fcr_ & kFcrEnable; }
  unsigned rx_trigger() const;
  uint8_t interrupt_id() const;  // IIR bits 3:0
  uint8_t modem_inputs() const;  // MSR bits 7:4
  void set_mcr(uint8_t value);
  void receive(uint8_t byte);  // a byte arriving at the receiver (loopback only)
  void clear_rx() { rx_head_ = rx_count_ = 0; }
  void update_irq();

  std::function<void(char)> output_;
  std::function<void(bool)> irq_;
  uint16_t base_;

  uint8_t ier_ = 0, lcr_ = 0x03, mcr_ = 0, scr_ = 0, fcr_ = 0;
  uint8_t dll_ = 0x01, dlm_ = 0;
  uint8_t lsr_errors_ = 0;  // OE/PE/FE/BI latched until LSR is read
  uint8_t msr_delta_ = 0;   // MSR bits 3:0 latched until MSR is read
  bool thr_ipending_ = false;
  bool irq_level_ = false;

  std::array<uint8_t, kFifoSize> rx_{};
  unsigned rx_head_ = 0, rx_count_ = 0;
  uint8_t rbr_ = 0;  // last byte read from RBR (what RBR shows when the receiver is empty)
};

}  // namespace vmm
