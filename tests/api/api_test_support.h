// What the API socket tests share: a short temporary directory (a Unix socket path has at most
// 107 bytes, more than Bazel's TEST_TMPDIR leaves), a server on a fake VM in it, and raw socket
// I/O for clients that misbehave in ways no HTTP library would.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "tests/api/fake_vm_api.h"
#include "vmm/api/api_server.h"

namespace vmm::api {

class ShortTempDir {
 public:
  ShortTempDir() {
    std::string pattern = "/tmp/pmuvm-api-XXXXXX";
    if (!mkdtemp(pattern.data())) ADD_FAILURE() << "mkdtemp: " << std::strerror(errno);
    path_ = pattern;
  }
  ~ShortTempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline sockaddr_un unix_address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  return addr;
}

// Leaves a socket file at `path` that nobody listens on, as a VMM that died does.
inline bool make_stale_socket(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr = unix_address(path);
  bool bound = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return bound;
}

// A connected Unix stream socket, or -1; reads time out after 10 s so a test cannot hang.
inline int connect_unix(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr = unix_address(path);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  return fd;
}

inline void send_all(int fd, const std::string& bytes) {
  for (size_t sent = 0; sent < bytes.size();) {
    ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the server may close first: that is allowed
    sent += static_cast<size_t>(n);
  }
}

// Everything the server sends until it closes the connection (or 10 s pass).
inline std::string read_until_closed(int fd) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

// One raw exchange: connect, send `bytes`, read the reply until the server closes. (Not a
// half-close after sending: httplib takes a peer at EOF for gone and answers nothing.)
inline std::string raw_exchange(const std::string& path, const std::string& bytes) {
  int fd = connect_unix(path);
  if (fd < 0) return "(cannot connect)";
  send_all(fd, bytes);
  std::string reply = read_until_closed(fd);
  close(fd);
  return reply;
}

// A started server on a FakeVmApi in a fresh directory.
class ApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ApiServer>(socket_, vm_);
    const Status started = server_->start();
    ASSERT_TRUE(started.ok()) << started.error().message;
  }

  ShortTempDir dir_;
  const std::string socket_ = dir_.path() + "/api.sock";
  FakeVmApi vm_;
  std::unique_ptr<ApiServer> server_;
};

}  // namespace vmm::api
