// Unix sockets between pmuvm processes talk only to this user or root (vmm/unix_connect.h,
// DESIGN §4.12; issue 38 item 2: a migration source connected to whoever listened at the
// destination's path and sent it the whole VM). The other user is a child process that
// switched to uid/gid 65534 (nobody): the test needs root, as CI has; without it it fails
// saying so.
#include "vmm/unix_connect.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace vmm {
namespace {

constexpr uid_t kNobody = 65534;

class UnixConnectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/pmuvm-unix-connect.XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    ::chmod(dir_.c_str(), 0777);  // the other user's listener binds here
    path_ = dir_ + "/sock";
  }
  void TearDown() override {
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  static int listener(const std::string& path) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd, 4) != 0)
      return -1;
    return fd;
  }
  // Runs `body` in a child as uid/gid nobody, which then says so on `ready` and waits until the
  // parent closes `release`.
  template <typename Body>
  pid_t as_nobody(const int (&ready)[2], const int (&release)[2], Body body) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(ready[0]);
      ::close(release[1]);
      const int ready_write = ready[1], release_read = release[0];
      if (::setresgid(kNobody, kNobody, kNobody) != 0 ||
          ::setresuid(kNobody, kNobody, kNobody) != 0)
        ::_exit(100 + errno);  // (the parent reads nothing, then this status)
      const int status = body();
      char c = 1;
      if (::write(ready_write, &c, 1) != 1) ::_exit(3);
      (void)!::read(release_read, &c, 1);
      ::_exit(status);
    }
    ::close(ready[1]);  // a child that ends early is an end of file, not a wait
    ::close(release[0]);
    return pid;
  }
  std::string dir_, path_;
};

TEST_F(UnixConnectTest, AListenerOfThisUserIsConnected) {
  const int l = listener(path_);
  ASSERT_GE(l, 0);
  const UnixConnection c = connect_unix(path_, 1000);
  ASSERT_GE(c.fd, 0) << std::strerror(c.error);
  EXPECT_EQ(c.peer_uid, ::geteuid());
  ::close(c.fd);
  ::close(l);
}

TEST_F(UnixConnectTest, AListenerOfAnotherUserIsRefusedBeforeAnythingIsSent) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root: a listener of another user is a child that "
                                "switched to uid 65534 (CI runs as root)";
  int ready[2], release[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(release), 0);
  const std::string path = path_;
  const pid_t child = as_nobody(ready, release, [&] { return listener(path) >= 0 ? 0 : 1; });
  char c = 0;
  if (::read(ready[0], &c, 1) != 1) {
    int status = 0;
    ::waitpid(child, &status, 0);
    FAIL() << "the child could not become uid 65534 (status " << status << ")";
  }
  const UnixConnection conn = connect_unix(path_, 1000);
  EXPECT_EQ(conn.fd, -1);
  EXPECT_EQ(conn.error, EACCES);
  EXPECT_EQ(conn.peer_uid, kNobody);
  ::close(release[1]);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST_F(UnixConnectTest, AConnectionFromAnotherUserIsNotTrusted) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root: a client of another user is a child that "
                                "switched to uid 65534 (CI runs as root)";
  const int l = listener(path_);
  ASSERT_GE(l, 0);
  ::chmod(path_.c_str(), 0777);  // (pmuvm's sockets are 0600: here the mode is not the check)
  int ready[2], release[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(release), 0);
  const std::string path = path_;
  const pid_t child = as_nobody(ready, release, [&] {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    return ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 ? 0 : 1;
  });
  char c = 0;
  if (::read(ready[0], &c, 1) != 1) {
    int status = 0;
    ::waitpid(child, &status, 0);
    FAIL() << "the child could not become uid 65534 and connect (status " << status << ")";
  }
  const int accepted = ::accept(l, nullptr, nullptr);
  ASSERT_GE(accepted, 0);
  uid_t uid = 0;
  EXPECT_FALSE(peer_is_trusted(accepted, &uid));
  EXPECT_EQ(uid, kNobody);
  ::close(release[1]);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ::close(accepted);
  ::close(l);
}

}  // namespace
}  // namespace vmm
