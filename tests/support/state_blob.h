// Crafted model-state blobs for the load checks (pmu/state_archive.h): a blob the model itself
// wrote, with one little-endian 32-bit field overwritten, counted from the blob's end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pmu::testing {

inline std::vector<std::byte> with_u32_from_end(std::vector<std::byte> blob, size_t offset_from_end,
                                                uint32_t value) {
  for (int i = 0; i < 4; ++i)
    blob.at(blob.size() - offset_from_end + i) = static_cast<std::byte>(value >> (8 * i));
  return blob;
}

}  // namespace pmu::testing
