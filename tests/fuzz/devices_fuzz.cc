// libFuzzer target for pmuvm's emulated devices (vmm/devices): the guest drives their ports, and
// a snapshot or migration stream carries their state (DESIGN §4.12). The input: u16 length, then
// that many bytes of archived state (the 16550's registers and receive FIFO, then the CMOS RAM
// and index: the archives of the machine's devices.serial and devices.cmos sections), loaded when
// they form a valid archive (else the devices start from reset); the rest is port accesses, 3 bytes
// each (port offset, value, read/write + device). Checked: no crash or sanitizer report, and a
// saved device reloads to the same bytes. Seeds (corpus_devices/): from reset, port accesses; and
// the state StateWriter saved after a loopback write of 5 bytes into the receive FIFO and a CMOS
// register B write, then reads of the FIFO, IIR and LSR, DLAB and DLL, CMOS index 0x7F and 0xFF.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "pmu/state_archive.h"
#include "vmm/devices/cmos_rtc.h"
#include "vmm/devices/serial_16550.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t state_bytes = data[0] | (size_t{data[1]} << 8);
  if (state_bytes > size - 2) return 0;
  vmm::Serial16550 serial([](char) {}, vmm::Serial16550::kCom1Base, [](bool) {});
  vmm::CmosRtc rtc([] { return std::time_t{1'700'000'000}; });
  try {
    pmu::StateReader r(std::span(reinterpret_cast<const std::byte*>(data + 2), state_bytes));
    r(serial, rtc);
    r.expect_end();
  } catch (const pmu::StateFormatError&) {
    serial = vmm::Serial16550([](char) {}, vmm::Serial16550::kCom1Base, [](bool) {});
    rtc = vmm::CmosRtc([] { return std::time_t{1'700'000'000}; });
  }
  for (size_t at = 2 + state_bytes; at + 3 <= size; at += 3) {
    const uint8_t offset = data[at], value = data[at + 1], how = data[at + 2];
    if (how & 2) {
      const uint16_t port = (offset & 1) ? vmm::CmosRtc::kDataPort : vmm::CmosRtc::kIndexPort;
      if (how & 1)
        rtc.write(port, value);
      else
        (void)rtc.read(port);
    } else {
      const uint16_t port = vmm::Serial16550::kCom1Base + offset % vmm::Serial16550::kPortCount;
      if (how & 1)
        serial.write(port, value);
      else
        (void)serial.read(port);
    }
  }
  pmu::StateWriter w;
  w(serial, rtc);
  const std::vector<std::byte> saved = w.take();
  vmm::Serial16550 serial2([](char) {}, vmm::Serial16550::kCom1Base, [](bool) {});
  vmm::CmosRtc rtc2([] { return std::time_t{1'700'000'000}; });
  pmu::StateReader r(saved);
  r(serial2, rtc2);  // throws, and so fails, if a state a guest can reach does not reload
  r.expect_end();
  pmu::StateWriter w2;
  w2(serial2, rtc2);
  if (w2.take() != saved) std::abort();
  return 0;
}
