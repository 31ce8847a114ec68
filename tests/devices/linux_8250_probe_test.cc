// Replays, access by access, the register sequences of Linux 6.1's 8250 driver
// (drivers/tty/serial/8250/8250_port.c) against the COM1 model and checks every value the driver
// tests: autoconfig() with its IER and loopback tests, autoconfig_16550a() with the
// CONFIG_SERIAL_8250_16550A_VARIANTS probes (EFR, NatSemi, TI16750, XScale, size_fifo()),
// autoconfig_irq(), serial8250_do_startup() (UART_BUG_THRE and UART_BUG_TXEN tests),
// serial8250_do_set_termios(), the console write path and the THRE-interrupt transmit path.
// The driver is re-expressed here as plain port accesses; the comments name the step.
#include "vmm/devices/serial_16550.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace vmm {
namespace {

enum Reg : int {
  kRx = 0,
  kTx = 0,
  kDll = 0,
  kIer = 1,
  kDlm = 1,
  kIir = 2,
  kFcr = 2,
  kEfr = 2,
  kLcr = 3,
  kMcr = 4,
  kLsr = 5,
  kMsr = 6,
  kScr = 7
};

// What Linux concludes about the port.
struct Probe {
  bool ier_test_passed = false;
  bool loop_test_passed = false;
  uint8_t loop_msr = 0;
  std::string type = "unknown";
  int fifo_count = -1;  // size_fifo() result, -1 = not run
};

class Linux8250 {
 public:
  explicit Linux8250(Serial16550& uart, uint16_t base = 0x3F8) : uart_(uart), base_(base) {}

  uint8_t in(int reg) { return uart_.read(static_cast<uint16_t>(base_ + reg)); }
  void out(int reg, int value) { uart_.write(static_cast<uint16_t>(base_ + reg), value & 0xFF); }

  unsigned dl_read() { return in(kDll) | in(kDlm) << 8; }
  void dl_write(unsigned dl) {
    out(kDll, dl & 0xFF);
    out(kDlm, dl >> 8 & 0xFF);
  }

  // autoconfig(); skip_test = UPF_SKIP_TEST (set for the legacy COM1-3 table, clear otherwise).
  Probe autoconfig(bool skip_test) {
    Probe p;
    // IER existence test.
    const uint8_t scratch = in(kIer);
    out(kIer, 0);
    const uint8_t scratch2 = in(kIer)&0x0F;
    out(kIer, 0x0F);
    const uint8_t scratch3 = in(kIer)&0x0F;
    out(kIer, scratch);
    p.ier_test_passed = scratch2 == 0 && scratch3 == 0x0F;
    if (!p.ier_test_passed) return p;

    const uint8_t save_mcr = in(kMcr);
    const uint8_t save_lcr = in(kLcr);
    if (!skip_test) {
      out(kMcr, 0x10 | 0x08 | 0x02);  // LOOP | OUT2 | RTS
      p.loop_msr = in(kMsr)&0xF0;
      out(kMcr, save_mcr);
      p.loop_test_passed = p.loop_msr == (0x80 | 0x10);  // DCD | CTS
      if (!p.loop_test_passed) return p;
    }

    out(kLcr, 0xBF);  // UART_LCR_CONF_MODE_B
    out(kEfr, 0);
    out(kLcr, 0);
    out(kFcr, 0x01);
    switch (in(kIir)&0xC0) {
      case 0x00: autoconfig_8250(p); break;
      case 0x80: p.type = "16550"; break;
      case 0xC0: autoconfig_16550a(p); break;
      default: p.type = "unknown"; break;
    }
    out(kLcr, save_lcr);
    if (p.type == "unknown") return p;

    // Reset the UART.
    out(kMcr, save_mcr);
    if (has_fifo(p)) {  // serial8250_clear_fifos()
      out(kFcr, 0x01);
      out(kFcr, 0x07);
      out(kFcr, 0x00);
    }
    in(kRx);
    out(kIer, 0);  // serial8250_clear_IER()
    return p;
  }

  void autoconfig_8250(Probe& p) {
    p.type = "8250";
    const uint8_t scratch = in(kScr);
    out(kScr, 0xA5);
    const uint8_t s1 = in(kScr);
    out(kScr, 0x5A);
    const uint8_t s2 = in(kScr);
    out(kScr, scratch);
    if (s1 == 0xA5 && s2 == 0x5A) p.type = "16450";
  }

  void autoconfig_16550a(Probe& p) {
    p.type = "16550A";
    // EFR with DLAB set: only ST16C650V1 (and FSL 64-byte parts) read 0 here.
    out(kLcr, 0x80);
    if (in(kEfr) == 0) {
      out(kEfr, 0xA8);
      p.type = in(kEfr) != 0 ? "ST16650" : "16550A_FSL64 or Motorola";
      out(kEfr, 0);
      return;
    }
    // EFR behind LCR=0xBF (ST16C650V2, TI16C752...). broken_efr() only runs if EFR read 0.
    out(kLcr, 0xBF);
    if (in(kEfr) == 0) {
      p.type = "EFRv2";
      return;
    }
    // National Semiconductor SuperIO: bank 2 EXCR1 mirrors MCR.LOOP.
    out(kLcr, 0);
    const uint8_t mcr = in(kMcr);
    out(kLcr, 0xE0);
    uint8_t excr1 = in(0x02);
    if (!((excr1 ^ mcr) & 0x10)) {
      out(kLcr, 0);
      out(kMcr, mcr ^ 0x10);
      out(kLcr, 0xE0);
      excr1 = in(0x02);
      out(kLcr, 0);
      out(kMcr, mcr);
      if ((excr1 ^ mcr) & 0x10) {
        p.type = "NS16550A";
        return;
      }
    }
    // TI16750: IIR bit 5 with the 64-byte FIFO enabled under DLAB only.
    out(kLcr, 0);
    out(kFcr, 0x01 | 0x20);
    const uint8_t st1 = in(kIir)&0xE0;
    out(kFcr, 0x01);
    out(kLcr, 0x80);
    out(kFcr, 0x01 | 0x20);
    const uint8_t st2 = in(kIir)&0xE0;
    out(kFcr, 0x01);
    out(kLcr, 0);
    if (st1 == 0xC0 && st2 == 0xE0) {
      p.type = "TI16750";
      return;
    }
    // XScale: IER bit 6 (UUE) writable.
    const uint8_t iersave = in(kIer);
    out(kIer, iersave & ~0x40);
    if (!(in(kIer)&0x40)) {
      out(kIer, iersave | 0x40);
      if (in(kIer)&0x40) {
        p.type = "XScale";
        return;
      }
    }
    out(kIer, iersave);
    p.fifo_count = size_fifo();
    if (p.fifo_count == 64) p.type = "U6_16550A";
  }

  int size_fifo() {
    const uint8_t old_lcr = in(kLcr);
    out(kLcr, 0);
    const uint8_t old_fcr = in(kFcr);  // reads IIR: FCR is write-only
    const uint8_t old_mcr = in(kMcr);
    out(kFcr, 0x07);
    out(kMcr, 0x10);  // loopback
    out(kLcr, 0x80);
    const unsigned old_dl = dl_read();
    dl_write(1);
    out(kLcr, 0x03);
    for (int i = 0; i < 256; ++i) out(kTx, i);
    int count = 0;
    while ((in(kLsr)&0x01) && count < 256) {
      in(kRx);
      ++count;
    }
    out(kFcr, old_fcr);
    out(kMcr, old_mcr);
    out(kLcr, 0x80);
    dl_write(old_dl);
    out(kLcr, old_lcr);
    return count;
  }

  static bool has_fifo(const Probe& p) { return p.type == "16550A"; }

  // autoconfig_irq() (CONFIG_SERIAL_8250_DETECT_IRQ): returns whether the line rose while probing.
  bool autoconfig_irq(const std::vector<bool>& irq_log) {
    const uint8_t save_mcr = in(kMcr);
    const uint8_t save_ier = in(kIer);
    out(kMcr, 0x04 | 0x08);                  // OUT1 | OUT2
    const size_t probe_on = irq_log.size();  // probe_irq_on()
    out(kMcr, 0);
    out(kMcr, 0x01 | 0x02 | 0x08);  // DTR | RTS | OUT2
    out(kIer, 0x0F);
    in(kLsr);
    in(kRx);
    in(kIir);
    in(kMsr);
    out(kTx, 0xFF);
    bool rose = false;  // probe_irq_off(): did IRQ4 fire in the window?
    for (size_t i = probe_on; i < irq_log.size(); ++i) rose |= irq_log[i];
    out(kMcr, save_mcr);
    out(kIer, save_ier);
    return rose;
  }

  struct Startup {
    uint8_t iir1 = 0, iir = 0, txen_lsr = 0, txen_iir = 0;
    bool lsr_safety_check = false;
    bool bug_thre = false, bug_txen = false;
  };

  // serial8250_do_startup() for a 16550A with port->irq != 0.
  Startup startup() {
    Startup s;
    out(kFcr, 0x01);  // serial8250_clear_fifos()
    out(kFcr, 0x07);
    out(kFcr, 0x00);
    in(kLsr);
    in(kRx);
    in(kIir);
    in(kMsr);
    s.lsr_safety_check = in(kLsr) == 0xFF;
    if (s.lsr_safety_check) return s;

    // UART_BUG_THRE test.
    wait_for_lsr(0x20);
    out(kIer, 0x02);
    s.iir1 = in(kIir);
    out(kIer, 0);
    out(kIer, 0x02);
    s.iir = in(kIir);
    out(kIer, 0);
    s.bug_thre = !(s.iir1 & 0x01) && (s.iir & 0x01);

    out(kLcr, 0x03);
    out(kMcr, 0x01 | 0x02 | 0x08);  // set_mctrl(DTR | RTS | OUT2): OUT2 because port->irq

    // UART_BUG_TXEN test.
    out(kIer, 0x02);
    s.txen_lsr = in(kLsr);
    s.txen_iir = in(kIir);
    out(kIer, 0);
    s.bug_txen = (s.txen_lsr & 0x40) && (s.txen_iir & 0x01);

    in(kLsr);
    in(kRx);
    in(kIir);
    in(kMsr);
    return s;
  }

  // serial8250_do_set_termios() for a 16550A: 115200 8N1, CLOCAL (no MSI).
  void set_termios() {
    ier_ = 0x01 | 0x04;  // RDI | RLSI, from startup
    out(kIer, ier_);
    out(kLcr, 0x03 | 0x80);
    dl_write(1);
    out(kLcr, 0x03);
    out(kFcr, 0x01);
    out(kFcr, 0x01 | 0x80 | 0x02 | 0x04);  // uart_config[PORT_16550A].fcr
    out(kMcr, 0x01 | 0x02 | 0x08);
  }

  bool wait_for_lsr(uint8_t bits) {
    for (int i = 0; i < 10000; ++i)
      if ((in(kLsr)&bits) == bits) return true;
    return false;
  }

  // serial8250_console_write(): IER off, poll BOTH_EMPTY before each byte, '\n' -> "\r\n".
  bool console_write(const std::string& s) {
    const uint8_t ier = in(kIer);
    out(kIer, 0);
    bool ok = true;
    for (char c : s) {
      if (c == '\n') {
        ok &= wait_for_lsr(0x60);
        out(kTx, '\r');
      }
      ok &= wait_for_lsr(0x60);
      out(kTx, c);
    }
    ok &= wait_for_lsr(0x60);
    out(kIer, ier);
    return ok;
  }

  // serial8250_start_tx() + interrupt handler: returns the number of interrupts taken.
  // `line` is the IRQ4 level; an interrupt is taken on each rising edge (edge-triggered PIC).
  int tty_write(const std::string& s, const std::vector<bool>& irq_log) {
    std::string pending = s;
    size_t seen = irq_log.size();
    auto edges = [&] {
      int n = 0;
      for (; seen < irq_log.size(); ++seen) n += irq_log[seen];
      return n;
    };
    ier_ |= 0x02;  // serial8250_set_THRI()
    out(kIer, ier_);
    int taken = 0;
    for (int queued = edges(); queued > 0 && taken < 100; queued += edges()) {
      --queued;
      ++taken;
      // serial8250_default_handle_irq() -> serial8250_handle_irq()
      const uint8_t iir = in(kIir);
      if (iir & 0x01) continue;
      const uint8_t lsr = in(kLsr);
      in(kMsr);                             // serial8250_modem_status()
      if ((lsr & 0x20) && (ier_ & 0x02)) {  // serial8250_tx_chars()
        for (int n = 0; n < 16 && !pending.empty(); ++n) {
          out(kTx, pending.front());
          pending.erase(0, 1);
        }
        if (pending.empty()) {  // __stop_tx() -> serial8250_clear_THRI()
          ier_ &= ~0x02;
          out(kIer, ier_);
        }
      }
    }
    return pending.empty() ? taken : -1;
  }

 private:
  Serial16550& uart_;
  uint16_t base_;
  uint8_t ier_ = 0;
};

class Linux8250Test : public ::testing::TestWithParam<int> {
 protected:
  std::string out_;
  std::vector<bool> irq_;
  Serial16550 uart_{[this](char c) { out_ += c; }, Serial16550::kCom1Base,
                    [this](bool level) { irq_.push_back(level); }};
  Linux8250 linux_{uart_};

  void SetUp() override {
    // What an early console left in MCR before the 8250 driver probes (the parameter).
    uart_.write(0x3FC, static_cast<uint8_t>(GetParam()));
  }
};

TEST_P(Linux8250Test, AutoconfigDetects16550A) {
  const Probe p = linux_.autoconfig(/*skip_test=*/false);
  EXPECT_TRUE(p.ier_test_passed);
  EXPECT_TRUE(p.loop_test_passed);
  EXPECT_EQ(p.loop_msr, 0x90);
  EXPECT_EQ(p.type, "16550A");
  EXPECT_EQ(p.fifo_count, 16);
  EXPECT_EQ(out_, "") << "probe bytes written in loopback must not reach the console";
  // The driver's state afterwards: MCR and LCR as before, IER 0, FIFOs off and empty.
  EXPECT_EQ(uart_.read(0x3FC), GetParam());
  EXPECT_EQ(uart_.read(0x3FB), 0x03);
  EXPECT_EQ(uart_.read(0x3F9), 0x00);
  EXPECT_EQ(uart_.read(0x3FD), 0x60);
  EXPECT_EQ(uart_.read(0x3FA), 0x01);
  uart_.write(0x3FB, 0x83);
  EXPECT_EQ(uart_.read(0x3F8), 0x01);  // size_fifo() restored the divisor
  EXPECT_EQ(uart_.read(0x3F9), 0x00);
}

TEST_P(Linux8250Test, AutoconfigWithSkipTestAlsoDetects16550A) {
  const Probe p = linux_.autoconfig(/*skip_test=*/true);  // legacy COM1 flags: UPF_SKIP_TEST
  EXPECT_EQ(p.type, "16550A");
  EXPECT_EQ(out_, "");
}

TEST_P(Linux8250Test, StartupFindsNoThreOrTxenBug) {
  ASSERT_EQ(linux_.autoconfig(false).type, "16550A");
  const auto s = linux_.startup();
  EXPECT_FALSE(s.lsr_safety_check);
  EXPECT_EQ(s.iir1, 0x02);  // THRI pending after enabling IER.THRI (FIFOs off at this point)
  EXPECT_EQ(s.iir, 0x02);   // re-asserted after IER 0 -> THRI although the first read cleared it
  EXPECT_FALSE(s.bug_thre);
  EXPECT_EQ(s.txen_lsr & 0x60, 0x60);
  EXPECT_EQ(s.txen_iir, 0x02);
  EXPECT_FALSE(s.bug_txen);
  EXPECT_EQ(out_, "");
  EXPECT_FALSE(uart_.irq_level());  // IER 0 after startup
}

TEST_P(Linux8250Test, AutoconfigIrqSeesIrq4) {
  ASSERT_EQ(linux_.autoconfig(false).type, "16550A");
  EXPECT_TRUE(linux_.autoconfig_irq(irq_));
  EXPECT_EQ(out_, "\xFF");  // the probe byte goes out, as on hardware
}

TEST_P(Linux8250Test, ConsoleAndTtyOutputAfterSetTermios) {
  ASSERT_EQ(linux_.autoconfig(false).type, "16550A");
  ASSERT_FALSE(linux_.startup().bug_thre);
  linux_.set_termios();
  EXPECT_EQ(uart_.read(0x3FA), 0xC1);  // FIFOs on, nothing pending
  EXPECT_EQ(uart_.read(0x3F9), 0x05);
  EXPECT_FALSE(uart_.irq_level());

  EXPECT_TRUE(linux_.console_write("Linux version 6.1\n"));
  EXPECT_EQ(out_, "Linux version 6.1\r\n");

  out_.clear();
  const std::string text = "Welcome to pmuvm! This line is longer than one FIFO load.\r\n";
  const int interrupts = linux_.tty_write(text, irq_);
  EXPECT_GT(interrupts, 0) << "the THRE interrupt must drive the transmit path";
  EXPECT_EQ(out_, text);
  EXPECT_FALSE(uart_.irq_level());  // THRI cleared once the buffer drained
  EXPECT_EQ(uart_.read(0x3FA), 0xC1);
}

INSTANTIATE_TEST_SUITE_P(EarlyConsoleMcr, Linux8250Test, ::testing::Values(0x00, 0x03, 0x0B));

}  // namespace
}  // namespace vmm
