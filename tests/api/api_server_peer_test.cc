// The API socket answers only this user and root (DESIGN §4.12; issue 38 item 2): the socket
// file is 0600, and a connection whose peer runs as another user is closed unanswered even where
// that mode was loosened. The other user is a child process that switched to uid/gid 65534
// (nobody): the test needs root, as CI has (outside Bazel's sandbox, whose user namespace maps
// no such user); without it it fails saying so.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/api/api_test_support.h"

namespace vmm::api {
namespace {

constexpr uid_t kNobody = 65534;

TEST_F(ApiServerTest, AConnectionFromAnotherUserIsClosedUnanswered) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root: the other user is a child that switched to uid "
                                "65534 (CI runs as root)";
  ::chmod(dir_.path().c_str(), 0777);
  ::chmod(socket_.c_str(), 0777);
  int answer[2];
  ASSERT_EQ(::pipe(answer), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(answer[0]);
    if (::setresgid(kNobody, kNobody, kNobody) != 0 || ::setresuid(kNobody, kNobody, kNobody) != 0)
      ::_exit(2);
    const std::string reply =
        raw_exchange(socket_, "GET /api/v1/vmm.ping HTTP/1.1\r\nHost: localhost\r\n\r\n");
    (void)!::write(answer[1], reply.data(), reply.size());
    ::_exit(0);
  }
  ::close(answer[1]);
  std::string reply;
  char buf[256];
  for (ssize_t n; (n = ::read(answer[0], buf, sizeof buf)) > 0;) reply.append(buf, n);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the child could not become uid 65534 (status " << status << ")";
  EXPECT_EQ(reply, "") << "another user's request was answered";
  EXPECT_TRUE(vm_.calls().empty());
  // This user is still answered.
  EXPECT_NE(raw_exchange(socket_, "GET /api/v1/vmm.ping HTTP/1.1\r\nHost: localhost\r\n\r\n")
                .find("200 OK"),
            std::string::npos);
}

}  // namespace
}  // namespace vmm::api
