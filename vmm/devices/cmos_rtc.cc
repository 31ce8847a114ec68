#include "vmm/devices/cmos_rtc.h"

#include <utility>

namespace vmm {
namespace {

constexpr uint8_t kSeconds = 0x00, kMinutes = 0x02, kHours = 0x04, kWeekday = 0x06, kDay = 0x07,
                  kMonth = 0x08, kYear = 0x09, kStatusA = 0x0A, kStatusB = 0x0B, kStatusC = 0x0C,
                  kStatusD = 0x0D, kCentury = 0x32;

uint8_t bcd(int v) { return static_cast<uint8_t>(((v / 10) << 4) | (v % 10)); }

}  // namespace

CmosRtc::CmosRtc(std::function<std::time_t()> now) : now_(std::move(now)) {
  ram_[kStatusA] = 0x26;  // UIP clear, divider 32.768 kHz, rate 1024 Hz
  ram_[kStatusB] = 0x02;  // 24-hour, BCD, no interrupts, no daylight saving
  ram_[kStatusD] = 0x80;  // valid RAM and time
}

uint8_t CmosRtc::read_register(uint8_t index) const {
  std::tm tm{};
  const std::time_t t = now_();
  gmtime_r(&t, &tm);
  switch (index) {
    case kSeconds: return bcd(tm.tm_sec > 59 ? 59 : tm.tm_sec);
    case kMinutes: return bcd(tm.tm_min);
    case kHours: return bcd(tm.tm_hour);
    case kWeekday: return bcd(tm.tm_wday + 1);
    case kDay: return bcd(tm.tm_mday);
    case kMonth: return bcd(tm.tm_mon + 1);
    case kYear: return bcd((tm.tm_year + 1900) % 100);
    case kCentury: return bcd((tm.tm_year + 1900) / 100);
    case kStatusC: return 0;  // no interrupt flags: none are generated
    default: return ram_[index];
  }
}

uint8_t CmosRtc::read(uint16_t port) {
  if (port == kIndexPort) return 0xFF;  // the index register is write-only
  return read_register(index_);
}

void CmosRtc::write(uint16_t port, uint8_t value) {
  if (port == kIndexPort) {
    index_ = value & 0x7F;  // bit 7 masks NMIs on a PC: nothing to mask here
    return;
  }
  switch (index_) {
    case kStatusA: ram_[kStatusA] = static_cast<uint8_t>((value & 0x7F)); return;  // UIP read-only
    case kStatusB:
      ram_[kStatusB] = static_cast<uint8_t>((value & ~0x04) | 0x02);
      return;  // BCD, 24 h
    case kStatusC:
    case kStatusD: return;  // read-only
    default: ram_[index_] = value;
  }
}

}  // namespace vmm
