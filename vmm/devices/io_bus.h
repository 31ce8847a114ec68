// The port I/O bus (Firecracker's vstate/bus.rs, kvmtool's kvm__register_pio): each device
// claims a range of ports, and an access reaches the one device whose range holds the port, or
// none. The bus itself is fixed once the VM is built and needs no lock; each device locks its own
// state (BusDevice::access may be called from every vCPU thread at once), so a vCPU printing to
// COM1 never waits for one reading the CMOS clock.
//
// An access returns what it asks of the machine beyond the device's own state (IoEffect): the
// run ends (the exit port, an i8042 reset), or a console line reached a pause point or a Linux
// panic. The run loop acts on it after the device's lock is released.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "vmm/result.h"

namespace vmm {

struct IoEffect {
  enum class Kind : uint8_t {
    // In the order of precedence when one access has several (IoEffect::merge).
    kNone,
    kPause,   // the VM pauses itself at a progress point (`text`: the reason)
    kEndRun,  // the guest ended the run with `status` (`text`: why, said in the log; "" = the
              // exit port, said only at debug level)
    kFail,    // the run fails with `text` (a Linux guest's panic)
  };
  Kind kind = Kind::kNone;
  int status = 0;
  std::string text;

  static IoEffect end_run(int status, std::string why) {
    return {Kind::kEndRun, status, std::move(why)};
  }
  static IoEffect pause(std::string reason) { return {Kind::kPause, 0, std::move(reason)}; }
  static IoEffect fail(std::string reason) { return {Kind::kFail, 0, std::move(reason)}; }
  // Keeps the stronger of this and `next` (a failure, then the end of the run, then a pause).
  void merge(IoEffect next) {
    if (next.kind > kind) *this = std::move(next);
  }
};

// An access nothing answers, as on a PC's ISA bus: a read floats high (0xFF bytes), a write is
// dropped. What the bus does where no device is, and a device with an access it does not take.
IoEffect unanswered(bool write, std::span<uint8_t> data);

class BusDevice {
 public:
  virtual ~BusDevice() = default;
  // One access of `data.size()` bytes (1, 2 or 4) at `port`: a write takes `data`, a read fills
  // it. Called from any vCPU thread; the device locks what it shares.
  virtual IoEffect access(uint16_t port, bool write, std::span<uint8_t> data) = 0;
};

class IoBus {
 public:
  // Claims ports [first, first + count) for `device` (which must outlive the bus). Fails
  // (kVmm: a VMM bug) when the range is empty, wraps past port 0xFFFF or overlaps a claimed one.
  Status insert(uint16_t first, uint32_t count, BusDevice& device);

  // The device at `port`, or null.
  BusDevice* find(uint16_t port) const;

  // One access: to the device at `port`; with none there, a read floats high (0xFF bytes) and a
  // write is dropped, as on a PC's ISA bus.
  IoEffect access(uint16_t port, bool write, std::span<uint8_t> data) const;

 private:
  struct Range {
    uint32_t first;
    uint32_t end;  // one past the last port
    BusDevice* device;
  };
  std::vector<Range> ranges_;  // sorted by `first`, disjoint
};

}  // namespace vmm
