#include "vmm/api/unix_socket_probe.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace vmm::api {

SocketProbe probe_unix_socket(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0)
    return {errno == ENOENT ? SocketProbe::State::kAbsent : SocketProbe::State::kError,
            std::strerror(errno)};
  if (!S_ISSOCK(st.st_mode)) return {SocketProbe::State::kNotSocket, ""};

  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() > kMaxUnixSocketPath)
    return {SocketProbe::State::kError, std::strerror(ENAMETOOLONG)};
  std::memcpy(addr.sun_path, path.data(), path.size());
  // Non-blocking: a Unix socket's connect completes at once while the listener's backlog has
  // room; when it is full a blocking connect would wait (forever, for a hung listener), a
  // non-blocking one fails with EAGAIN, which still means someone listens.
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return {SocketProbe::State::kError, std::strerror(errno)};
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  int err = errno;
  close(fd);
  if (rc == 0 || err == EAGAIN) return {SocketProbe::State::kListening, ""};
  if (err == ECONNREFUSED) return {SocketProbe::State::kStale, std::strerror(err)};
  if (err == ENOENT) return {SocketProbe::State::kAbsent, std::strerror(err)};
  return {SocketProbe::State::kError, std::strerror(err)};
}

}  // namespace vmm::api
