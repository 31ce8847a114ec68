#include "vmm/devices/port_devices.h"

#include <spdlog/spdlog.h>

#include <array>
#include <cstring>

#include "guest/abi/pmuvm_abi.h"

namespace vmm {
SerialPort::SerialPort(GuestConsole& console)
    : console_(console),
      serial_([this](char c) { printed_.merge(console_.print(std::string_view(&c, 1))); }) {}

RunEffect SerialPort::access(uint16_t port, bool write, std::span<uint8_t> data) {
  std::lock_guard<std::mutex> g(lock_);
  printed_ = {};
  // Byte registers: a wider access reaches the first byte only.
  if (write)
    serial_.write(port, data[0]);
  else
    data[0] = serial_.read(port);
  return std::exchange(printed_, {});
}

void SerialPort::set_irq_callback(std::function<void(bool level)> irq) {
  std::lock_guard<std::mutex> g(lock_);
  serial_.set_irq_callback(std::move(irq));
}

RunEffect CmosPort::access(uint16_t port, bool write, std::span<uint8_t> data) {
  std::lock_guard<std::mutex> g(lock_);
  if (write)
    rtc_.write(port, data[0]);
  else
    data[0] = rtc_.read(port);
  return {};
}

RunEffect ResetPort::access(uint16_t port, bool write, std::span<uint8_t> data) {
  I8042Reset i8042;
  if (!write) {
    data[0] = i8042.read(port);
    return {};
  }
  if (!i8042.write(port, data[0])) return {};
  return RunEffect::end_run(0, "guest reset the machine (i8042 command 0xFE)");
}

RunEffect ExitPort::access(uint16_t, bool write, std::span<uint8_t> data) {
  // Only a 4-byte OUT means something here.
  if (!write || data.size() != 4) return unanswered(write, data);
  uint32_t status = 0;
  std::memcpy(&status, data.data(), 4);
  spdlog::debug("guest reported exit status {}", status);
  return RunEffect::end_run(static_cast<int>(status & 0xFF), "");
}

RunEffect BlockConsolePort::access(uint16_t, bool write, std::span<uint8_t> data) {
  if (!write || data.size() != 4) return unanswered(write, data);
  uint32_t gpa = 0;
  std::memcpy(&gpa, data.data(), 4);
  uint32_t length = 0;
  std::array<std::byte, PMUVM_CONSOLE_BLOCK_BYTES> bytes;
  if (!ram_.read(gpa, std::as_writable_bytes(std::span(&length, 1))) || length > bytes.size() ||
      !ram_.read(uint64_t{gpa} + 4, std::span(bytes).first(length))) {
    spdlog::debug("console block at {:#x}: not in RAM or {} bytes long; dropped", gpa, length);
    return {};
  }
  return console_.print(std::string_view(reinterpret_cast<const char*>(bytes.data()), length));
}

}  // namespace vmm
