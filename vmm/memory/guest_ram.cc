#include "vmm/memory/guest_ram.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace vmm {

GuestRam::GuestRam(uint64_t size, Backing backing) : size_(size) {
  if (size == 0 || size % 4096 != 0)
    throw std::runtime_error("guest RAM size must be a non-zero multiple of 4 KiB");
  // Host address = guest address modulo 2 MiB, so that KVM can map the host's transparent huge
  // pages as 2 MiB nested-page-table entries (one nested fault per 2 MiB, not per 4 KiB): map
  // 2 MiB more than needed and give back the unaligned head and the tail.
  constexpr uint64_t kAlign = uint64_t{2} << 20;
  if (size > (uint64_t{1} << 47))
    throw std::runtime_error("guest RAM size beyond the address space");
  void* p = mmap(nullptr, size + kAlign, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    throw std::runtime_error(std::string("cannot map guest RAM: ") + std::strerror(errno));
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (start + kAlign - 1) & ~(kAlign - 1);
  if (aligned > start) munmap(p, aligned - start);
  if (const uintptr_t tail = start + size + kAlign - (aligned + size); tail > 0)
    munmap(reinterpret_cast<void*>(aligned + size), tail);
  base_ = reinterpret_cast<std::byte*>(aligned);
  if (backing == Backing::kShareable) {
    // The same place, from a memfd instead (mapped over the anonymous reservation).
    fd_ = memfd_create("pmuvm-guest-ram", MFD_CLOEXEC);
    if (fd_ < 0 || ftruncate(fd_, static_cast<off_t>(size)) != 0 ||
        mmap(base_, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE, fd_, 0) ==
            MAP_FAILED) {
      const std::string why = std::strerror(errno);
      if (fd_ >= 0) close(fd_);
      munmap(base_, size);
      throw std::runtime_error("cannot map shareable guest RAM: " + why);
    }
  }
}

std::vector<GuestRam::Region> GuestRam::regions() const {
  std::vector<Region> out{{0, low_size(), base_}};
  if (high_size() > 0) out.push_back({kHighRamStart, high_size(), base_ + low_size()});
  return out;
}

GuestRam::~GuestRam() {
  if (base_) munmap(base_, size_);
  if (fd_ >= 0) close(fd_);
}

bool GuestRam::read(uint64_t gpa, std::span<std::byte> out) const {
  const std::byte* src = host(gpa, out.size());
  if (!src) return false;
  if (!out.empty()) std::memcpy(out.data(), src, out.size());  // an empty span's data() may be null
  return true;
}

bool GuestRam::write(uint64_t gpa, std::span<const std::byte> in) {
  std::byte* dst = host(gpa, in.size());
  if (!dst) return false;
  if (in.empty()) return true;  // an empty span's data() may be null, which memcpy must not get
  std::memcpy(dst, in.data(), in.size());
  note_written(gpa, in.size());
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
  note_written(gpa, 8);
  return true;
}

void GuestRam::set_write_tracking(bool on) {
  if (on && !written_) {
    const uint64_t words = (size_ / 4096 + 63) / 64;
    written_ = std::make_unique<std::atomic<uint64_t>[]>(words);
    for (uint64_t i = 0; i < words; ++i) written_[i] = 0;
  }
  tracking_ = on;
}

void GuestRam::log_written(uint64_t gpa, uint64_t length) {
  const std::byte* p = host(gpa, length);
  if (!p || length == 0 || !written_) return;
  const uint64_t first = static_cast<uint64_t>(p - base_) / 4096;
  const uint64_t last = static_cast<uint64_t>(p - base_ + length - 1) / 4096;
  for (uint64_t page = first; page <= last; ++page)
    written_[page / 64].fetch_or(uint64_t{1} << (page % 64), std::memory_order_relaxed);
}

std::vector<uint64_t> GuestRam::take_written_pages() {
  std::vector<uint64_t> pages;
  if (!written_) return pages;
  const uint64_t low_pages = low_size() / 4096;
  for (uint64_t w = 0; w < (size_ / 4096 + 63) / 64; ++w)
    for (uint64_t bits = written_[w].exchange(0); bits; bits &= bits - 1) {
      const uint64_t page = w * 64 + __builtin_ctzll(bits);  // host offset page
      pages.push_back(page < low_pages ? page : kHighRamStart / 4096 + (page - low_pages));
    }
  return pages;
}

}  // namespace vmm
