// The COM1 console, register by register: what a polled 8250/16550 driver does must work and print
// exactly its bytes, and every register behaves as a 16550A's does (NS PC16550D data sheet).
#include "vmm/devices/serial_16550.h"

#include <gtest/gtest.h>

#include "pmu/state_archive.h"
#include "tests/support/state_blob.h"

#include <string>
#include <vector>

namespace vmm {
namespace {

// Offsets from the base (names as in Linux's serial_reg.h).
constexpr uint16_t kBase = 0x3F8;
constexpr uint16_t RX = kBase + 0, TX = kBase + 0, DLL = kBase + 0;
constexpr uint16_t IER = kBase + 1, DLM = kBase + 1;
constexpr uint16_t IIR = kBase + 2, FCR = kBase + 2;
constexpr uint16_t LCR = kBase + 3, MCR = kBase + 4, LSR = kBase + 5, MSR = kBase + 6;
constexpr uint16_t SCR = kBase + 7;

class SerialTest : public ::testing::Test {
 protected:
  std::string out_;
  std::vector<bool> irq_;
  Serial16550 uart_{[this](char c) { out_ += c; }};

  void wire_irq() {
    uart_.set_irq_callback([this](bool level) { irq_.push_back(level); });
  }
};

TEST_F(SerialTest, OwnsExactlyCom1Ports) {
  EXPECT_FALSE(uart_.owns(0x3F7));
  EXPECT_TRUE(uart_.owns(0x3F8));
  EXPECT_TRUE(uart_.owns(0x3FF));
  EXPECT_FALSE(uart_.owns(0x400));
}

TEST_F(SerialTest, StateAfterFirmware) {
  EXPECT_EQ(uart_.read(IER), 0x00);
  EXPECT_EQ(uart_.read(IIR), 0x01);  // no interrupt, FIFOs off
  EXPECT_EQ(uart_.read(LCR), 0x03);  // 8N1
  EXPECT_EQ(uart_.read(MCR), 0x00);
  EXPECT_EQ(uart_.read(LSR), 0x60);  // THRE | TEMT, nothing received
  EXPECT_EQ(uart_.read(MSR), 0xB0);  // CTS | DSR | DCD, no deltas
  uart_.write(LCR, 0x83);
  EXPECT_EQ(uart_.read(DLL), 0x01);  // 115200 baud
  EXPECT_EQ(uart_.read(DLM), 0x00);
  EXPECT_FALSE(uart_.irq_level());
}

TEST_F(SerialTest, PolledTransmitPrintsBytes) {
  for (char c : std::string("hi\n")) {
    ASSERT_TRUE(uart_.read(LSR) & 0x20);  // THRE
    uart_.write(TX, static_cast<uint8_t>(c));
  }
  EXPECT_EQ(out_, "hi\n");
}

TEST_F(SerialTest, EveryByteValueIsTransmittedUnchanged) {
  for (int b = 0; b < 256; ++b) uart_.write(TX, static_cast<uint8_t>(b));
  ASSERT_EQ(out_.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(static_cast<uint8_t>(out_[b]), b);
  EXPECT_EQ(uart_.read(LSR), 0x60);  // still nothing received, no overrun
}

TEST_F(SerialTest, DivisorLatchDoesNotPrint) {
  uart_.write(LCR, 0x80);  // DLAB
  uart_.write(DLL, 0x03);  // 38400 baud
  uart_.write(DLM, 0x00);
  EXPECT_EQ(uart_.read(DLL), 0x03);
  uart_.write(LCR, 0x03);  // 8N1
  EXPECT_EQ(out_, "");
  EXPECT_EQ(uart_.read(LCR), 0x03);
}

TEST_F(SerialTest, DivisorLatchAndIerAreSeparateRegisters) {
  uart_.write(IER, 0x05);
  uart_.write(LCR, 0x80);
  uart_.write(DLL, 0x34);
  uart_.write(DLM, 0x12);
  EXPECT_EQ(uart_.read(DLL), 0x34);
  EXPECT_EQ(uart_.read(DLM), 0x12);
  uart_.write(DLL, 0x00);  // what autoconfig_read_divisor_id() does: 0 reads back 0 (no XR16C850)
  uart_.write(DLM, 0x00);
  EXPECT_EQ(uart_.read(DLL) | uart_.read(DLM) << 8, 0x0000);
  uart_.write(LCR, 0x03);
  EXPECT_EQ(uart_.read(IER), 0x05);
  EXPECT_EQ(uart_.read(RX), 0x00);  // RBR, not DLL
  uart_.write(LCR, 0x80);
  EXPECT_EQ(uart_.read(DLL), 0x00);
}

TEST_F(SerialTest, ScratchRegister) {
  // autoconfig_8250(): SCR must hold 0xA5 and 0x5A (else the chip is a plain 8250).
  uart_.write(SCR, 0xA5);
  EXPECT_EQ(uart_.read(SCR), 0xA5);
  uart_.write(SCR, 0x5A);
  EXPECT_EQ(uart_.read(SCR), 0x5A);
  uart_.write(LCR, 0x80);  // independent of DLAB
  EXPECT_EQ(uart_.read(SCR), 0x5A);
}

TEST_F(SerialTest, IerHoldsOnlyTheFourInterruptBits) {
  uart_.write(IER, 0x00);
  EXPECT_EQ(uart_.read(IER), 0x00);
  uart_.write(IER, 0x0F);
  EXPECT_EQ(uart_.read(IER), 0x0F);
  uart_.write(IER, 0xFF);  // UUE (bit 6) etc. do not exist on a 16550A
  EXPECT_EQ(uart_.read(IER), 0x0F);
  uart_.write(MCR, 0xFF);
  EXPECT_EQ(uart_.read(MCR), 0x1F);
}

TEST_F(SerialTest, FcrEnablesFifosAndIirShowsThem) {
  uart_.write(FCR, 0x01);
  EXPECT_EQ(uart_.read(IIR), 0xC1);  // 16550A: both FIFO bits, not 0x80 (16550, broken FIFO)
  uart_.write(FCR, 0x21);            // 64-byte FIFO bit of a 16750: not here
  EXPECT_EQ(uart_.read(IIR) & 0xE0, 0xC0);
  uart_.write(LCR, 0x80);
  uart_.write(FCR, 0x21);  // not even with DLAB set
  EXPECT_EQ(uart_.read(IIR) & 0xE0, 0xC0);
  uart_.write(LCR, 0x03);
  uart_.write(FCR, 0x00);
  EXPECT_EQ(uart_.read(IIR), 0x01);
}

TEST_F(SerialTest, LoopbackKeepsBytesInsideAndReceivesThem) {
  uart_.write(MCR, 0x10);
  uart_.write(TX, 'x');
  EXPECT_EQ(out_, "");
  EXPECT_EQ(uart_.read(LSR), 0x61);  // DR | THRE | TEMT
  EXPECT_EQ(uart_.read(RX), 'x');
  EXPECT_EQ(uart_.read(LSR), 0x60);
  uart_.write(MCR, 0x00);
  uart_.write(TX, 'y');
  EXPECT_EQ(out_, "y");
  EXPECT_EQ(uart_.read(LSR), 0x60);
}

TEST_F(SerialTest, LoopbackMapsModemControlToModemStatus) {
  struct Case {
    uint8_t mcr, msr_status;
  };
  const Case cases[] = {
      {0x10, 0x00},  // all outputs off
      {0x11, 0x20},  // DTR  -> DSR
      {0x12, 0x10},  // RTS  -> CTS
      {0x14, 0x40},  // OUT1 -> RI
      {0x18, 0x80},  // OUT2 -> DCD
      {0x1A, 0x90},  // Linux autoconfig(): LOOP|OUT2|RTS must give DCD|CTS
      {0x1F, 0xF0},
  };
  for (const Case& c : cases) {
    uart_.write(MCR, c.mcr);
    EXPECT_EQ(uart_.read(MSR) & 0xF0, c.msr_status) << "MCR=" << int(c.mcr);
  }
}

TEST_F(SerialTest, ModemStatusDeltasLatchUntilRead) {
  EXPECT_EQ(uart_.read(MSR), 0xB0);
  uart_.write(MCR, 0x1A);            // loopback: CTS stays, DSR drops, DCD stays
  EXPECT_EQ(uart_.read(MSR), 0x92);  // CTS | DCD | DDSR
  EXPECT_EQ(uart_.read(MSR), 0x90);  // deltas cleared by the read
  uart_.write(MCR, 0x14);            // RI rises, CTS and DCD drop
  EXPECT_EQ(uart_.read(MSR), 0x49);  // RI | DDCD | DCTS (no TERI on a rising edge)
  uart_.write(MCR, 0x10);            // RI falls: trailing edge
  EXPECT_EQ(uart_.read(MSR), 0x04);  // TERI
  uart_.write(MCR, 0x00);            // back to the external lines
  EXPECT_EQ(uart_.read(MSR), 0xBB);  // CTS|DSR|DCD with DCTS|DDSR|DDCD
  EXPECT_EQ(uart_.read(MSR), 0xB0);
}

TEST_F(SerialTest, ReceiverFifoHoldsSixteenThenOverruns) {
  uart_.write(FCR, 0x07);  // enable + clear both FIFOs
  uart_.write(MCR, 0x10);
  for (int i = 0; i < 20; ++i) uart_.write(TX, static_cast<uint8_t>('a' + i));
  EXPECT_EQ(uart_.read(LSR), 0x63);  // DR | OE | THRE | TEMT
  EXPECT_EQ(uart_.read(LSR), 0x61);  // OE cleared by reading LSR
  std::string got;
  while (uart_.read(LSR) & 0x01) got += static_cast<char>(uart_.read(RX));
  EXPECT_EQ(got, "abcdefghijklmnop");  // the first 16; the overrunning bytes are lost
  EXPECT_EQ(out_, "");
}

TEST_F(SerialTest, WithoutFifoTheNewByteOverwritesRbr) {
  uart_.write(MCR, 0x10);
  uart_.write(TX, '1');
  uart_.write(TX, '2');
  EXPECT_EQ(uart_.read(LSR), 0x63);
  EXPECT_EQ(uart_.read(RX), '2');
  EXPECT_EQ(uart_.read(LSR), 0x60);
}

TEST_F(SerialTest, FifoControlBitsNeedTheEnableBit) {
  uart_.write(MCR, 0x10);
  uart_.write(FCR, 0x01);
  uart_.write(TX, 'a');
  uart_.write(FCR, 0x02);  // bit 0 clear: "clear RX" is not programmed, FIFOs switch off...
  EXPECT_EQ(uart_.read(IIR), 0x01);
  EXPECT_EQ(uart_.read(LSR) & 0x01, 0);  // ...and switching them off empties them
  uart_.write(FCR, 0x01);
  uart_.write(TX, 'b');
  uart_.write(FCR, 0x03);  // enable + clear RX
  EXPECT_EQ(uart_.read(LSR) & 0x01, 0);
  EXPECT_EQ(uart_.read(IIR), 0xC1);
}

TEST_F(SerialTest, NothingToReceiveAndNoInterruptPending) {
  EXPECT_EQ(uart_.read(LSR) & 0x01, 0);
  EXPECT_EQ(uart_.read(IIR) & 0x01, 1);
  uart_.write(IER, 0x0D);  // RDI | RLSI | MSI: none of them has a cause
  EXPECT_EQ(uart_.read(IIR), 0x01);
}

TEST_F(SerialTest, ThreInterruptIsAcknowledgedByReadingIir) {
  uart_.write(IER, 0x02);            // THRI 0 -> 1 with THR empty
  EXPECT_EQ(uart_.read(IIR), 0x02);  // THRE pending
  EXPECT_EQ(uart_.read(IIR), 0x01);  // the read acknowledged it
  uart_.write(IER, 0x02);            // rewriting the same value does not re-arm
  EXPECT_EQ(uart_.read(IIR), 0x01);
  uart_.write(TX, 'a');  // THR empties again at once
  EXPECT_EQ(uart_.read(IIR), 0x02);
  uart_.write(TX, 'b');
  uart_.write(IER, 0x00);  // disabling drops it
  EXPECT_EQ(uart_.read(IIR), 0x01);
  uart_.write(IER, 0x02);  // re-enabling re-arms it
  EXPECT_EQ(uart_.read(IIR), 0x02);
  EXPECT_EQ(out_, "ab");
}

TEST_F(SerialTest, ThreAckOnlyWhenThreIsTheReportedSource) {
  uart_.write(MCR, 0x10);
  uart_.write(TX, 'z');              // one byte received (loopback)
  uart_.write(IER, 0x03);            // RDI | THRI
  EXPECT_EQ(uart_.read(IIR), 0x04);  // received data outranks THRE...
  EXPECT_EQ(uart_.read(IIR), 0x04);  // ...and reading IIR does not consume THRE
  EXPECT_EQ(uart_.read(RX), 'z');
  EXPECT_EQ(uart_.read(IIR), 0x02);
  EXPECT_EQ(uart_.read(IIR), 0x01);
}

TEST_F(SerialTest, InterruptPriorities) {
  uart_.write(MCR, 0x10);
  uart_.write(TX, '1');
  uart_.write(TX, '2');    // overrun (no FIFO)
  uart_.write(MCR, 0x11);  // DSR changes: modem status delta
  uart_.write(IER, 0x0F);
  EXPECT_EQ(uart_.read(IIR), 0x06);  // receiver line status first
  uart_.read(LSR);                   // clears OE
  EXPECT_EQ(uart_.read(IIR), 0x04);  // then received data
  uart_.read(RX);
  EXPECT_EQ(uart_.read(IIR), 0x02);  // then THRE (consumed by this read)
  EXPECT_EQ(uart_.read(IIR), 0x00);  // then modem status
  uart_.read(MSR);
  EXPECT_EQ(uart_.read(IIR), 0x01);
}

TEST_F(SerialTest, FifoTriggerLevelAndCharacterTimeout) {
  uart_.write(FCR, 0x47);  // FIFOs on, trigger level 4
  uart_.write(MCR, 0x10);
  uart_.write(IER, 0x01);
  for (char c : std::string("abc")) uart_.write(TX, static_cast<uint8_t>(c));
  EXPECT_EQ(uart_.read(IIR), 0xCC);  // below the trigger: character timeout
  uart_.write(TX, 'd');
  EXPECT_EQ(uart_.read(IIR), 0xC4);  // at the trigger: received data available
  uart_.read(RX);
  EXPECT_EQ(uart_.read(IIR), 0xCC);
  uart_.read(RX), uart_.read(RX), uart_.read(RX);
  EXPECT_EQ(uart_.read(IIR), 0xC1);
}

TEST_F(SerialTest, IrqLineFollowsPendingInterruptGatedByOut2) {
  wire_irq();
  uart_.write(IER, 0x02);  // pending, but OUT2 is off: the line stays low
  EXPECT_FALSE(uart_.irq_level());
  EXPECT_TRUE(irq_.empty());
  uart_.write(MCR, 0x08);  // OUT2 connects the line
  EXPECT_TRUE(uart_.irq_level());
  EXPECT_EQ(uart_.read(IIR), 0x02);  // acknowledge: line drops
  EXPECT_FALSE(uart_.irq_level());
  uart_.write(TX, 'a');  // THR empties: line rises again (a new edge)
  EXPECT_TRUE(uart_.irq_level());
  uart_.write(TX, 'b');    // still pending: no callback for an unchanged level
  uart_.write(MCR, 0x18);  // loopback disconnects the line
  EXPECT_FALSE(uart_.irq_level());
  uart_.write(MCR, 0x08);
  EXPECT_TRUE(uart_.irq_level());
  uart_.write(IER, 0x00);
  EXPECT_FALSE(uart_.irq_level());
  EXPECT_EQ(irq_, (std::vector<bool>{true, false, true, false, true, false}));
  EXPECT_EQ(out_, "ab");
}

TEST_F(SerialTest, LateIrqWiringReportsAnAssertedLine) {
  uart_.write(MCR, 0x08);
  uart_.write(IER, 0x02);
  EXPECT_TRUE(uart_.irq_level());
  wire_irq();
  EXPECT_EQ(irq_, std::vector<bool>{true});
}

TEST_F(SerialTest, WorksAtAnotherBase) {
  std::string out;
  Serial16550 com2([&](char c) { out += c; }, 0x2F8);
  EXPECT_TRUE(com2.owns(0x2F8));
  EXPECT_FALSE(com2.owns(0x3F8));
  com2.write(0x2FF, 0x42);
  EXPECT_EQ(com2.read(0x2FF), 0x42);
  com2.write(0x2F8, 'q');
  EXPECT_EQ(out, "q");
}

// The receive FIFO's head and count from a crafted snapshot would place the next received byte
// anywhere in the host's memory: they are checked when loaded.
TEST_F(SerialTest, LoadedFifoIndicesAreChecked) {
  pmu::StateWriter w;
  uart_.archive(w);
  const std::vector<std::byte> good = w.bytes();
  {
    Serial16550 copy([](char) {});
    pmu::StateReader r(good);
    copy.archive(r);
  }
  // The blob ends with rx_head_ (u32), rx_count_ (u32), rbr_ (u8).
  auto patched = [&](size_t offset_from_end, uint32_t value) {
    return pmu::testing::with_u32_from_end(good, offset_from_end, value);
  };
  for (const std::vector<std::byte>& bad :
       {patched(9, 16), patched(9, 0x40000000), patched(5, 17)}) {
    Serial16550 target([](char) {});
    pmu::StateReader r(bad);
    EXPECT_THROW(target.archive(r), pmu::StateFormatError);
  }
}

}  // namespace
}  // namespace vmm
