// Opening and reading a file named from outside (a snapshot's files, a guest image) as what it
// claims to be (DESIGN §4.12): a regular file — a FIFO is opened without waiting for a writer and
// refused, a device refused, a symbolic link followed only when asked — of at most a limit,
// checked before a byte is read. The callers word the refusals; this says what was wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>

namespace vmm {

struct RegularFileProblem {
  enum class Kind {
    kCannotOpen,    // `error_number` says why
    kSymbolicLink,  // and links are not followed
    kNotRegular,
    kTooLarge,   // `size` bytes
    kReadError,  // `error_number` says why
    kChanged,    // its size changed while it was read
  };
  Kind kind;
  int error_number = 0;
  uint64_t size = 0;
};

struct OpenRegularFile {
  int fd;  // the caller's to close
  uint64_t size;
};

// `path` opened for reading, when it is a regular file of at most `limit` bytes.
std::variant<OpenRegularFile, RegularFileProblem> open_regular_file(const std::string& path,
                                                                    uint64_t limit,
                                                                    bool follow_links);

// All of it, into the `size` bytes `storage(size)` returns; nothing when it was read whole.
std::optional<RegularFileProblem> read_regular_file(
    const std::string& path, uint64_t limit, bool follow_links,
    const std::function<void*(size_t size)>& storage);

}  // namespace vmm
