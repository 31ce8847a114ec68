#include "vmm/loader/image_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace vmm {

Status read_image_into(const std::string& path, uint64_t limit, const std::string& limit_why,
                       const std::function<void*(size_t size)>& storage) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error::usage(path + ": cannot open (" + std::strerror(errno) + ")");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return Error::usage(path + ": cannot read (" + std::strerror(errno) + ")");
  if (!S_ISREG(st.st_mode)) return Error::usage(path + ": not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > limit)
    return Error::usage(path + ": " + std::to_string(size) + " bytes, larger than " + limit_why);
  auto* bytes = static_cast<char*>(storage(size));
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(fd, bytes + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::usage(path + ": cannot read (" + std::strerror(errno) + ")");
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  char extra;
  if (got != size || ::read(fd, &extra, 1) != 0)
    return Error::usage(path + ": changed size while it was read");
  return {};
}

}  // namespace vmm
