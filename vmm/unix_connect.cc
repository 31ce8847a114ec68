#include "vmm/unix_connect.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace vmm {

bool peer_is_trusted(int fd, uid_t* peer_uid) {
  ucred peer{};
  socklen_t size = sizeof peer;
  if (peer_uid) *peer_uid = static_cast<uid_t>(-1);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0) return false;
  if (peer_uid) *peer_uid = peer.uid;
  return peer.uid == ::geteuid() || peer.uid == 0;
}

UnixConnection connect_unix(const std::string& path, int timeout_ms) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) return {-1, ENAMETOOLONG};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {-1, errno};
  const timeval limit{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  int result = ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  if (result == 0) {
    do {
      result = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    } while (result != 0 && errno == EINTR);
  }
  if (result == 0) {
    // Nothing is sent before the peer is known to be this user's (or root's).
    uid_t uid = 0;
    if (peer_is_trusted(fd, &uid)) return {fd, 0, uid};
    ::close(fd);
    return {-1, EACCES, uid};
  }
  const int error = errno;
  ::close(fd);
  return {-1, error};
}

}  // namespace vmm
