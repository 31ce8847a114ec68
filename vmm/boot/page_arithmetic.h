// Page rounding and the hex form of addresses, shared by the loaders (guest_loader.cc,
// linux_boot.cc) for their layout checks and their one-line errors.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace vmm::boot_math {

inline constexpr uint64_t kPage = 4096;
constexpr uint64_t page_down(uint64_t a) { return a & ~(kPage - 1); }
constexpr uint64_t page_up(uint64_t a) { return (a + kPage - 1) & ~(kPage - 1); }

inline std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%#llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace vmm::boot_math
