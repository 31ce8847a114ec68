// The guest's RAM: one anonymous host mapping, seen by the guest as up to two regions so that the
// 32-bit MMIO hole stays free, as on a PC:
//   low   guest-physical 0 .. min(size, 3 GiB)            host offset 0
//   high  guest-physical 4 GiB .. 4 GiB + (size - 3 GiB)  host offset 3 GiB (only when size > 3
//   GiB)
// The hole 3–4 GiB holds the LAPIC (0xFEE00000), the IOAPIC (0xFEC00000) and the TSS/identity
// pages KVM needs on Intel (0xFFFBC000): RAM mapped over them would shadow the devices.
// Every access from the VMM goes through the bounds checks here, so no guest-controlled address
// can make the VMM read or write host memory outside the guest's RAM.
#pragma once

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace vmm {

class GuestRam {
 public:
  // Private: anonymous memory (transparent huge pages where the host gives them). Shareable: a
  // memfd, so that its pages can be mapped a second time elsewhere (fd(); --stepper emulate
  // maps guest frames at their linear addresses: vmm/emulate/user_code_emulator.h).
  enum class Backing { kPrivate, kShareable };
  // Maps `size` bytes (a multiple of 4 KiB). Throws std::runtime_error with a one-line reason
  // when the host refuses the mapping.
  explicit GuestRam(uint64_t size, Backing backing = Backing::kPrivate);
  ~GuestRam();
  GuestRam(const GuestRam&) = delete;
  GuestRam& operator=(const GuestRam&) = delete;

  static constexpr uint64_t kMmioHoleStart = 0xC0000000;  // 3 GiB
  static constexpr uint64_t kHighRamStart = 0x100000000;  // 4 GiB

  // One guest-physical range of RAM and where it lives in the host mapping.
  struct Region {
    uint64_t gpa = 0;
    uint64_t size = 0;
    std::byte* host = nullptr;
  };

  uint64_t size() const { return size_; }  // all RAM, both regions
  uint64_t low_size() const { return size_ < kMmioHoleStart ? size_ : kMmioHoleStart; }
  uint64_t high_size() const { return size_ - low_size(); }
  std::byte* host_base() const { return base_; }
  // Shareable RAM's memfd (-1: private); the RAM at host_base() + k is its offset k.
  int fd() const { return fd_; }
  // The low region, then the high one when there is one.
  std::vector<Region> regions() const;

  // True when [gpa, gpa + length) lies inside one RAM region (and does not wrap).
  bool contains(uint64_t gpa, uint64_t length) const { return host(gpa, length) != nullptr; }
  // Host pointer for [gpa, gpa + length), or nullptr when any byte is outside RAM. A range that
  // spans the hole is outside RAM (the hole is not RAM).
  std::byte* host(uint64_t gpa, uint64_t length) const {
    const uint64_t low = low_size();
    if (gpa <= low && length <= low - gpa) return base_ + gpa;
    const uint64_t high = size_ - low;
    if (high == 0 || gpa < kHighRamStart) return nullptr;
    const uint64_t off = gpa - kHighRamStart;
    return off <= high && length <= high - off ? base_ + low + off : nullptr;
  }

  bool read(uint64_t gpa, std::span<std::byte> out) const;
  bool write(uint64_t gpa, std::span<const std::byte> in);
  bool read_u64(uint64_t gpa, uint64_t& value) const;
  bool write_u64(uint64_t gpa, uint64_t value);

  // Live migration: KVM's dirty log sees only the guest's own writes, not the VMM's (LWP records
  // and MissedEvents, the guest-assisted stepper's frame marks). While tracking is on, every VMM
  // write path (write(), write_u64(), PagedGuestMemory::write) logs its pages here.
  void set_write_tracking(bool on);
  void note_written(uint64_t gpa, uint64_t length) {
    if (tracking_.load(std::memory_order_relaxed)) log_written(gpa, length);
  }
  // The guest-physical page numbers written since the last call (and clears the log).
  std::vector<uint64_t> take_written_pages();

 private:
  void log_written(uint64_t gpa, uint64_t length);

  std::byte* base_ = nullptr;
  uint64_t size_ = 0;
  int fd_ = -1;
  std::atomic<bool> tracking_{false};
  std::unique_ptr<std::atomic<uint64_t>[]> written_;  // bit per 4 KiB page, by host offset
};

}  // namespace vmm
