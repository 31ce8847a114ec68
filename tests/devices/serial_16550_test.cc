// The COM1 console: what a polled 8250/16550 driver does must work and print exactly its bytes.
#include "vmm/devices/serial_16550.h"

#include <gtest/gtest.h>

#include <string>

namespace vmm {
namespace {

class SerialTest : public ::testing::Test {
 protected:
  std::string out_;
  Serial16550 uart_{[this](char c) { out_ += c; }};
};

TEST_F(SerialTest, OwnsExactlyCom1Ports) {
  EXPECT_FALSE(uart_.owns(0x3F7));
  EXPECT_TRUE(uart_.owns(0x3F8));
  EXPECT_TRUE(uart_.owns(0x3FF));
  EXPECT_FALSE(uart_.owns(0x400));
}

TEST_F(SerialTest, PolledTransmitPrintsBytes) {
  for (char c : std::string("hi\n")) {
    ASSERT_TRUE(uart_.read(0x3FD) & 0x20);  // THRE
    uart_.write(0x3F8, static_cast<uint8_t>(c));
  }
  EXPECT_EQ(out_, "hi\n");
}

TEST_F(SerialTest, DivisorLatchDoesNotPrint) {
  uart_.write(0x3FB, 0x80);  // DLAB
  uart_.write(0x3F8, 0x03);  // 38400 baud
  uart_.write(0x3F9, 0x00);
  EXPECT_EQ(uart_.read(0x3F8), 0x03);
  uart_.write(0x3FB, 0x03);  // 8N1
  EXPECT_EQ(out_, "");
  EXPECT_EQ(uart_.read(0x3FB), 0x03);
}

TEST_F(SerialTest, ScratchRegisterAndLoopbackProbe) {
  uart_.write(0x3FF, 0x5A);
  EXPECT_EQ(uart_.read(0x3FF), 0x5A);
  uart_.write(0x3FC, 0x10);  // loopback: writes do not leave the UART
  uart_.write(0x3F8, 'x');
  EXPECT_EQ(out_, "");
  EXPECT_EQ(uart_.read(0x3FE) & 0xF0, 0xF0);
}

TEST_F(SerialTest, NothingToReceiveAndNoInterruptPending) {
  EXPECT_EQ(uart_.read(0x3FD) & 0x01, 0);
  EXPECT_EQ(uart_.read(0x3FA) & 0x01, 1);
}

}  // namespace
}  // namespace vmm
