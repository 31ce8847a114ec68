#include "vmm/emulate/shadow_page_tables.h"

#include <algorithm>
#include <new>

namespace vmm {
namespace {

constexpr uint64_t kPresent = 1, kWritable = 2, kUser = 4, kExecuteDisable = 1ull << 63;
constexpr uint64_t kUserTop = 1ull << 47;  // canonical user addresses lie below

}  // namespace

ShadowPageTables::ShadowPageTables()
    : pages_(static_cast<uint64_t*>(std::aligned_alloc(4096, size()))) {
  if (!pages_) throw std::bad_alloc();
  std::fill_n(pages_.get(), kPages * 512, 0);
}

bool ShadowPageTables::set(uint64_t linear, bool writable, bool executable) {
  if (linear >= kUserTop) return false;
  size_t t = 0;
  // PML4, PDPT, PD: each entry present, writable, user; the leaf decides.
  for (int shift = 39; shift >= 21; shift -= 9) {
    uint64_t& e = table(t)[(linear >> shift) & 511];
    if (!(e & kPresent)) {
      if (used_ == kPages) return false;
      std::fill_n(table(used_), 512, 0);
      e = (kBase + used_ * 4096) | kPresent | kWritable | kUser;
      ++used_;
    }
    t = static_cast<size_t>(((e & ~uint64_t{0xFFF} & ~kExecuteDisable) - kBase) / 4096);
  }
  // The address field: Unicorn 2.0.1 ignores it (the header); 0 has no reserved bits.
  table(t)[(linear >> 12) & 511] = kPresent | (executable ? 0 : kUser) | (writable ? kWritable : 0);
  return true;
}

void ShadowPageTables::clear(uint64_t linear) {
  if (linear >= kUserTop) return;
  size_t t = 0;
  for (int shift = 39; shift >= 21; shift -= 9) {
    const uint64_t e = table(t)[(linear >> shift) & 511];
    if (!(e & kPresent)) return;
    t = static_cast<size_t>(((e & ~uint64_t{0xFFF} & ~kExecuteDisable) - kBase) / 4096);
  }
  table(t)[(linear >> 12) & 511] = 0;
}

void ShadowPageTables::reset() {
  std::fill_n(table(0), 512, 0);
  used_ = 1;
}

}  // namespace vmm
