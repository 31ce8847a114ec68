#include "vmm/memory/guest_ram.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace vmm {

GuestRam::GuestRam(uint64_t size) : size_(size) {
  if (size == 0 || size % 4096 != 0)
    throw std::runtime_error("guest RAM size must be a non-zero multiple of 4 KiB");
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED)
    throw std::runtime_error(std::string("cannot map guest RAM: ") + std::strerror(errno));
  base_ = static_cast<std::byte*>(p);
}

std::vector<GuestRam::Region> GuestRam::regions() const {
  std::vector<Region> out{{0, low_size(), base_}};
  if (high_size() > 0) out.push_back({kHighRamStart, high_size(), base_ + low_size()});
  return out;
}

GuestRam::~GuestRam() {
  if (base_) munmap(base_, size_);
}

bool GuestRam::read(uint64_t gpa, std::span<std::byte> out) const {
  const std::byte* src = host(gpa, out.size());
  if (!src) return false;
  std::memcpy(out.data(), src, out.size());
  return true;
}

bool GuestRam::write(uint64_t gpa, std::span<const std::byte> in) {
  std::byte* dst = host(gpa, in.size());
  if (!dst) return false;
  std::memcpy(dst, in.data(), in.size());
  return true;
}

bool GuestRam::read_u64(uint64_t gpa, uint64_t& value) const {
  const std::byte* src = host(gpa, 8);
  if (!src) return false;
  std::memcpy(&value, src, 8);  // x86 host, little-endian guest
  return true;
}

bool GuestRam::write_u64(uint64_t gpa, uint64_t value) {
  std::byte* dst = host(gpa, 8);
  if (!dst) return false;
  std::memcpy(dst, &value, 8);
  return true;
}

}  // namespace vmm
