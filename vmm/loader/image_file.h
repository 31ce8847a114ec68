// Reading a guest image (kernel, initrd, program) from a file the user named: a regular file,
// no larger than where it must go, checked before a byte is read (DESIGN §4.12: /dev/zero or a
// 100 GiB file named by mistake must be a one-line refusal, not a VMM that reads until memory
// runs out).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "vmm/result.h"

namespace vmm {

// The whole file at `path`, at most `limit` bytes. Errors (Error::usage) name the path: it
// cannot be opened, is not a regular file, is larger than `limit` (saying `limit_why`, e.g.
// "the guest's 64 MiB of RAM"), or changed size while read.
Result<std::vector<std::byte>> read_image_file(const std::string& path, uint64_t limit,
                                               const std::string& limit_why);

}  // namespace vmm
