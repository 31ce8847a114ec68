#include "vmm/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <optional>

namespace vmm {

std::variant<OpenRegularFile, RegularFileProblem> open_regular_file(const std::string& path,
                                                                    uint64_t limit,
                                                                    bool follow_links) {
  using Kind = RegularFileProblem::Kind;
  const int fd =
      ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | (follow_links ? 0 : O_NOFOLLOW));
  if (fd < 0 && errno == ELOOP && !follow_links) return RegularFileProblem{Kind::kSymbolicLink};
  if (fd < 0) return RegularFileProblem{Kind::kCannotOpen, errno};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return RegularFileProblem{Kind::kNotRegular};
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > limit) {
    ::close(fd);
    return RegularFileProblem{Kind::kTooLarge, 0, size};
  }
  return OpenRegularFile{fd, size};
}

std::optional<RegularFileProblem> read_regular_file(
    const std::string& path, uint64_t limit, bool follow_links,
    const std::function<void*(size_t size)>& storage) {
  auto opened = open_regular_file(path, limit, follow_links);
  if (auto* problem = std::get_if<RegularFileProblem>(&opened)) return *problem;
  const auto [fd, size] = std::get<OpenRegularFile>(opened);
  auto* bytes = static_cast<char*>(storage(size));
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(fd, bytes + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error_number = errno;
      ::close(fd);
      return RegularFileProblem{RegularFileProblem::Kind::kReadError, error_number};
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  char extra;
  const bool grew = got == size && ::read(fd, &extra, 1) > 0;
  ::close(fd);
  if (got != size || grew) return RegularFileProblem{RegularFileProblem::Kind::kChanged};
  return std::nullopt;
}

}  // namespace vmm
