// Reading a guest image (kernel, initrd, program) from a file the user named: a regular file,
// no larger than where it must go, checked before a byte is read (DESIGN §4.12: /dev/zero or a
// 100 GiB file named by mistake must be a one-line refusal, not a VMM that reads until memory
// runs out).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "vmm/result.h"

namespace vmm {

// Reads the whole file at `path`, at most `limit` bytes, into the `size` bytes `storage(size)`
// returns. Errors (Error::usage) name the path: it cannot be opened, is not a regular file, is
// larger than `limit` (saying `limit_why`, e.g. "the guest's 64 MiB of RAM"), or changed size
// while read.
Status read_image_into(const std::string& path, uint64_t limit, const std::string& limit_why,
                       const std::function<void*(size_t size)>& storage);

// The whole file as `Byte`s (std::byte for an ELF, uint8_t for a bzImage or an initrd: read
// straight into the type its parser takes, not copied from one to the other).
template <typename Byte>
Result<std::vector<Byte>> read_image_file(const std::string& path, uint64_t limit,
                                          const std::string& limit_why) {
  static_assert(sizeof(Byte) == 1);
  std::vector<Byte> bytes;
  const Status read = read_image_into(path, limit, limit_why, [&](size_t size) -> void* {
    bytes.resize(size);
    return bytes.data();
  });
  if (!read.ok()) return read.error();
  return bytes;
}

}  // namespace vmm
