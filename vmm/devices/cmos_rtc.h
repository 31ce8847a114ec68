// The PC's MC146818 real-time clock and CMOS RAM at ports 0x70 (index; bit 7 = NMI mask) and
// 0x71 (data), as much as an OS reads at boot: Linux takes the wall-clock time from it
// (mach_get_cmos_time: waits for Status A's update-in-progress bit to clear, checks Status D's
// valid-RAM bit, reads BCD time in 24-hour mode) and writes the shutdown-status byte 0x0F before
// it starts application processors. Without a device both ports read 0xFF, which Linux takes as
// "update in progress" and "RTC not valid" (a warning at boot, a 1900s clock).
//
// Modelled: time and date registers read from the host's clock (UTC) at each read, BCD, 24-hour
// (Status B = 0x02), never updating (Status A = 0x26: UIP clear, 32.768 kHz, 1024 Hz), no
// interrupts (Status C reads 0), Status D = 0x80 (valid); the century at 0x32; the other bytes
// are 128 bytes of RAM that keep what is written. Time writes are accepted into RAM and ignored
// (the guest cannot set the host's clock).
#pragma once

#include <array>
#include <cstdint>
#include <ctime>
#include <functional>
#include <string>

#include "pmu/state_archive.h"

namespace vmm {

class CmosRtc {
 public:
  static constexpr uint16_t kIndexPort = 0x70, kDataPort = 0x71;

  // `now` returns the wall-clock time to report (injectable for tests).
  explicit CmosRtc(std::function<std::time_t()> now = [] { return std::time(nullptr); });

  bool owns(uint16_t port) const { return port == kIndexPort || port == kDataPort; }
  uint8_t read(uint16_t port);
  void write(uint16_t port, uint8_t value);

  // Snapshot / migration (the clock itself is the host's wall time).
  // The version of what archive() saves: bump it with any change to that (snapshot sections,
  // vmm/snapshot/state_sections.h).
  static constexpr uint16_t kStateVersion = 1;
  template <class Archive>
  void archive(Archive& a) {
    a(ram_, index_);
    if constexpr (Archive::kLoading) {
      if (index_ >= ram_.size())  // the index port keeps 7 bits: a larger one is crafted
        throw pmu::StateFormatError("CMOS state: index " + std::to_string(index_) + " (128 bytes)");
    }
  }

 private:
  uint8_t read_register(uint8_t index) const;

  std::function<std::time_t()> now_;
  std::array<uint8_t, 128> ram_{};
  uint8_t index_ = 0;
};

}  // namespace vmm
