// A blocking connect to a Unix stream socket with a deadline: what `pmuvm ctl` (the API client)
// and a migration source both need. A Unix-socket connect completes at once while the
// listener's backlog has room and otherwise waits for room as long as the socket's send timeout
// allows (SO_SNDTIMEO), then fails with EAGAIN.
#pragma once

#include <string>

namespace vmm {

struct UnixConnection {
  int fd = -1;    // connected (close it), or -1
  int error = 0;  // errno when fd is -1: EAGAIN = nothing accepted within the timeout,
                  // ENAMETOOLONG = the path does not fit a Unix socket address
};

UnixConnection connect_unix(const std::string& path, int timeout_ms);

}  // namespace vmm
