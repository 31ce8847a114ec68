// Little-endian integers in byte buffers: the snapshot container and the migration frames.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace vmm {

// Appends the low `n` bytes of `v`, least significant first.
inline void append_le(std::vector<std::byte>& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}

// The `n`-byte little-endian integer at `p` (the caller checked that `n` bytes are there).
inline uint64_t read_le(const std::byte* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace vmm
