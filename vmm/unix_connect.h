// Unix stream sockets between pmuvm processes (DESIGN §4.12: "sockets are 0600 and check the
// peer's uid — on both ends of a migration and in ctl"): a blocking connect with a deadline that
// talks only to a peer of this user or root, and the same check for a connection accepted.
// A Unix-socket connect completes at once while the listener's backlog has room and otherwise
// waits for room as long as the socket's send timeout allows (SO_SNDTIMEO), then fails with
// EAGAIN.
#pragma once

#include <sys/types.h>

#include <string>

namespace vmm {

// Whether the process at the other end of `fd` runs as this process's user or as root (a
// socket file's mode is easily loosened: a shared directory, a chmod, a copy; and a path can be
// taken by another user before pmuvm binds it). `peer_uid` gets the peer's uid ((uid_t)-1 where
// it cannot be read).
bool peer_is_trusted(int fd, uid_t* peer_uid = nullptr);

struct UnixConnection {
  int fd = -1;    // connected (close it), or -1
  int error = 0;  // errno when fd is -1: EAGAIN = nothing accepted within the timeout,
                  // ENAMETOOLONG = the path does not fit a Unix socket address, EACCES = the
                  // listener runs as another user (peer_uid), not root
  uid_t peer_uid = 0;
};

UnixConnection connect_unix(const std::string& path, int timeout_ms);

}  // namespace vmm
