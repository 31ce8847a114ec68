// The guest's RAM: one anonymous mapping, guest-physical address 0 .. size. Every access from the
// VMM goes through the bounds checks here, so no guest-controlled address can make the VMM read or
// write host memory outside the guest's RAM.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace vmm {

class GuestRam {
 public:
  // Maps `size` bytes (a multiple of 4 KiB). Throws std::runtime_error with a one-line reason
  // when the host refuses the mapping.
  explicit GuestRam(uint64_t size);
  ~GuestRam();
  GuestRam(const GuestRam&) = delete;
  GuestRam& operator=(const GuestRam&) = delete;

  uint64_t size() const { return size_; }
  std::byte* host_base() const { return base_; }

  // True when [gpa, gpa + length) lies inside RAM (and does not wrap).
  bool contains(uint64_t gpa, uint64_t length) const {
    return gpa <= size_ && length <= size_ - gpa;
  }
  // Host pointer for [gpa, gpa + length), or nullptr when any byte is outside RAM.
  std::byte* host(uint64_t gpa, uint64_t length) const {
    return contains(gpa, length) ? base_ + gpa : nullptr;
  }

  bool read(uint64_t gpa, std::span<std::byte> out) const;
  bool write(uint64_t gpa, std::span<const std::byte> in);
  bool read_u64(uint64_t gpa, uint64_t& value) const;
  bool write_u64(uint64_t gpa, uint64_t value);

 private:
  std::byte* base_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace vmm
