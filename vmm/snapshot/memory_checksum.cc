#include "vmm/snapshot/memory_checksum.h"

#include <zlib.h>

#include <array>
#include <cstring>

#include "vmm/snapshot/state_sections.h"

namespace vmm {
namespace {

constexpr size_t kPage = 4096;

bool all_zero(const std::byte* page) {
  // Eight words at a time, stopping at the first block with a set bit: a page with data is
  // usually told apart within its first 64 bytes.
  for (size_t at = 0; at < kPage; at += 64) {
    uint64_t w[8];
    std::memcpy(w, page + at, sizeof w);
    if ((w[0] | w[1] | w[2] | w[3] | w[4] | w[5] | w[6] | w[7]) != 0) return false;
  }
  return true;
}

// CRC-32 of `pages` x 4 KiB of zero bytes (from 0), by combining the CRCs of 2^k zero pages.
uLong zero_pages_crc(uint64_t pages) {
  static const std::array<uLong, 48> kPowers = [] {
    std::array<uLong, 48> t{};
    static const Bytef zero[kPage] = {};
    t[0] = crc32(0, zero, kPage);
    for (size_t k = 1; k < t.size(); ++k)
      t[k] = crc32_combine(t[k - 1], t[k - 1], static_cast<z_off_t>(kPage << (k - 1)));
    return t;
  }();
  uLong crc = 0;  // of no bytes
  for (size_t k = 0; pages != 0; ++k, pages >>= 1)
    if (pages & 1) crc = crc32_combine(crc, kPowers[k], static_cast<z_off_t>(kPage << k));
  return crc;
}

}  // namespace

uint32_t crc32_of_memory(std::span<const std::byte> bytes, uint32_t crc) {
  const std::byte* p = bytes.data();
  const size_t whole = bytes.size() - bytes.size() % kPage;
  uLong c = crc;
  uint64_t zero_run = 0;  // zero pages seen and not yet folded in
  size_t at = 0;
  while (at < whole) {
    if (all_zero(p + at)) {
      ++zero_run;
      at += kPage;
      continue;
    }
    if (zero_run) {
      c = crc32_combine(c, zero_pages_crc(zero_run), static_cast<z_off_t>(zero_run * kPage));
      zero_run = 0;
    }
    size_t end = at + kPage;  // a run of pages with data: one call
    while (end < whole && !all_zero(p + end)) end += kPage;
    c = crc32_of({p + at, end - at}, static_cast<uint32_t>(c));
    at = end;
  }
  if (zero_run)
    c = crc32_combine(c, zero_pages_crc(zero_run), static_cast<z_off_t>(zero_run * kPage));
  return crc32_of(bytes.subspan(whole), static_cast<uint32_t>(c));
}

}  // namespace vmm
