// The RTC as Linux's mach_get_cmos_time / mc146818_get_time read it: UIP clear, valid RAM, BCD
// 24-hour time of the injected clock; CMOS RAM keeps what is written; read-only status bytes.
#include "vmm/devices/cmos_rtc.h"

#include <gtest/gtest.h>

#include <vector>

#include "pmu/state_archive.h"

namespace vmm {
namespace {

uint8_t reg(CmosRtc& rtc, uint8_t index) {
  rtc.write(CmosRtc::kIndexPort, index);
  return rtc.read(CmosRtc::kDataPort);
}

TEST(CmosRtcTest, ReportsTheClockInBcd) {
  // 2026-11-23 14:05:09 UTC, a Monday.
  CmosRtc rtc([] { return std::time_t{1795442709}; });
  EXPECT_EQ(reg(rtc, 0x00), 0x09);
  EXPECT_EQ(reg(rtc, 0x02), 0x05);
  EXPECT_EQ(reg(rtc, 0x04), 0x14);
  EXPECT_EQ(reg(rtc, 0x06), 0x02);  // weekday 1 = Sunday
  EXPECT_EQ(reg(rtc, 0x07), 0x23);
  EXPECT_EQ(reg(rtc, 0x08), 0x11);
  EXPECT_EQ(reg(rtc, 0x09), 0x26);
  EXPECT_EQ(reg(rtc, 0x32), 0x20);
}

TEST(CmosRtcTest, StatusRegistersSayReadableNow) {
  CmosRtc rtc([] { return std::time_t{0}; });
  EXPECT_EQ(reg(rtc, 0x0A) & 0x80, 0);  // no update in progress
  EXPECT_EQ(reg(rtc, 0x0B), 0x02);      // 24-hour, BCD
  EXPECT_EQ(reg(rtc, 0x0C), 0x00);
  EXPECT_EQ(reg(rtc, 0x0D), 0x80);  // valid RAM and time (bit 6 clear)
  rtc.write(CmosRtc::kIndexPort, 0x0D);
  rtc.write(CmosRtc::kDataPort, 0x00);  // read-only
  EXPECT_EQ(reg(rtc, 0x0D), 0x80);
  rtc.write(CmosRtc::kIndexPort, 0x0B);
  rtc.write(CmosRtc::kDataPort, 0x06);  // binary mode asked for: the model stays BCD
  EXPECT_EQ(reg(rtc, 0x0B), 0x02);
}

TEST(CmosRtcTest, RamKeepsWritesAndTheIndexIgnoresTheNmiBit) {
  CmosRtc rtc([] { return std::time_t{0}; });
  rtc.write(CmosRtc::kIndexPort, 0x80 | 0x0F);  // NMI masked, shutdown status byte
  rtc.write(CmosRtc::kDataPort, 0x0A);          // Linux's warm-reset code before INIT/SIPI
  EXPECT_EQ(reg(rtc, 0x0F), 0x0A);
  EXPECT_EQ(reg(rtc, 0x7F), 0x00);
  EXPECT_EQ(rtc.read(CmosRtc::kIndexPort), 0xFF);  // write-only
  EXPECT_TRUE(rtc.owns(0x70));
  EXPECT_TRUE(rtc.owns(0x71));
  EXPECT_FALSE(rtc.owns(0x72));
}

// The index register selects one of 128 bytes: a crafted snapshot's index would read and write
// past them.
TEST(CmosRtcTest, LoadedIndexIsChecked) {
  CmosRtc rtc([] { return std::time_t{0}; });
  pmu::StateWriter w;
  rtc.archive(w);
  std::vector<std::byte> bytes = w.take();
  {
    CmosRtc copy([] { return std::time_t{0}; });
    pmu::StateReader r(bytes);
    copy.archive(r);
  }
  bytes.back() = std::byte{0x80};  // index_ is the last byte
  CmosRtc target([] { return std::time_t{0}; });
  pmu::StateReader r(bytes);
  EXPECT_THROW(target.archive(r), pmu::StateFormatError);
}

}  // namespace
}  // namespace vmm
