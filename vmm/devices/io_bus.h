// The port I/O bus (Firecracker's vstate/bus.rs, kvmtool's kvm__register_pio): each device
// claims a range of ports, and an access reaches the one device whose range holds the port, or
// none. The bus itself is fixed once the VM is built and needs no lock; each device locks its own
// state (BusDevice::access may be called from every vCPU thread at once), so a vCPU printing to
// COM1 never waits for one reading the CMOS clock.
//
// An access returns what it asks of the machine beyond the device's own state (RunEffect): the
// run ends (the exit port, an i8042 reset), or a console line reached a pause point or a Linux
// panic. The run loop acts on it after the device's lock is released; the exit handler returns
// the same for every exit (vmm/machine/exit_handler.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "vmm/result.h"

namespace vmm {

// What a port access or a KVM exit asks of the run.
struct RunEffect {
  enum class Kind : uint8_t {
    // In the order of precedence when one access has several (RunEffect::merge).
    kResume,  // nothing: the vCPU runs on
    kPause,   // the VM pauses itself at a progress point (`text`: the reason), then runs on
    kEndRun,  // the guest ended the run with `status` (`text`: why, said in the log; "" = the
              // exit port, said only at debug level)
    kFail,    // the run fails (status 3) with `text` (a Linux guest's panic, a fatal exit)
  };
  Kind kind = Kind::kResume;
  int status = 0;
  std::string text;

  static RunEffect end_run(int status, std::string why) {
    return {Kind::kEndRun, status, std::move(why)};
  }
  static RunEffect pause(std::string reason) { return {Kind::kPause, 0, std::move(reason)}; }
  static RunEffect fail(std::string reason) { return {Kind::kFail, 0, std::move(reason)}; }
  // Keeps the stronger of this and `next` (a failure, then the end of the run, then a pause).
  void merge(RunEffect next) {
    if (next.kind > kind) *this = std::move(next);
  }
};

// An access nothing answers, as on a PC's ISA bus: a read floats high (0xFF bytes), a write is
// dropped. What the bus does where no device is, and a device with an access it does not take.
RunEffect unanswered(bool write, std::span<uint8_t> data);

class BusDevice {
 public:
  virtual ~BusDevice() = default;
  // One access of `data.size()` bytes (1, 2 or 4) at `port`: a write takes `data`, a read fills
  // it. Called from any vCPU thread; the device locks what it shares.
  virtual RunEffect access(uint16_t port, bool write, std::span<uint8_t> data) = 0;
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
  RunEffect access(uint16_t port, bool write, std::span<uint8_t> data) const;

 private:
  struct Range {
    uint32_t first;
    uint32_t end;  // one past the last port
    BusDevice* device;
  };
  std::vector<Range> ranges_;  // sorted by `first`, disjoint
};

}  // namespace vmm
