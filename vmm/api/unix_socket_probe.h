// Is anyone listening at a Unix socket path? The server asks before it binds (a live socket is
// another VMM's and must be left alone; a stale file from a VMM that died is replaced) and the
// client asks after a failed connection, for the reason (a regular file there refuses like a
// stale socket).
#pragma once

#include <string>

namespace vmm::api {

struct SocketProbe {
  enum class State {
    kAbsent,     // nothing at the path
    kListening,  // a socket with a process accepting on it
    kStale,      // a socket file nobody listens on (connect: ECONNREFUSED)
    kNotSocket,  // something else is there (a file, a directory)
    kError,      // connect failed otherwise (EACCES, ...): see `error`
  } state;
  std::string error;  // strerror of the failed connect (every state but kListening and kNotSocket)
};

// Connects to `path` and closes again at once; a server sees a connection that sends nothing.
SocketProbe probe_unix_socket(const std::string& path);

// sun_path's size less its NUL: the longest path a Unix socket can have.
constexpr size_t kMaxUnixSocketPath = 107;

}  // namespace vmm::api
