// libFuzzer target for the API socket's HTTP (vmm/api/http_wire.h): anyone who can connect to
// the socket sends these bytes (DESIGN §4.12). Byte 0 picks the side: even, the bytes are a
// request that read_request screens and reads, as the server does; odd, they are the answer that
// exchange() reads for `pmuvm ctl`, as from a server that answers garbage. They arrive on a Unix
// socket pair whose writer then closes. Checked: no crash or sanitizer report, an answer within
// the limits (a body no larger than allowed), and nothing waits (the peer closed, so every read
// ends; the deadline is a backstop).
// Seeds (corpus_http_wire/): requests `pmuvm ctl` sends and answers the server gives.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <variant>

#include "vmm/api/http_wire.h"

namespace {

constexpr size_t kMaxBody = 4096;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Everything must fit the socket buffer at once: this thread writes it all before reading.
  if (size < 1 || size > 64 * 1024) return 0;
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) std::abort();
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  if (!bytes.empty() &&
      write(fds[1], bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size()))
    std::abort();
  shutdown(fds[1], SHUT_WR);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  if ((data[0] & 1) == 0) {
    const vmm::api::IncomingRequest in = vmm::api::read_request(
        fds[0], -1, deadline, vmm::api::RequestLimits{.max_body_bytes = kMaxBody},
        [](const vmm::api::HttpHead& head) { return head.method != "DELETE"; });
    if (in.outcome == vmm::api::IncomingRequest::Outcome::kComplete &&
        in.request.body.size() > kMaxBody)
      std::abort();
  } else {
    auto answer = vmm::api::exchange(fds[0], "GET /vm.state HTTP/1.1\r\nHost: pmuvm\r\n\r\n",
                                     deadline, kMaxBody);
    if (const auto* r = answer.ok() ? &answer.value() : nullptr; r && r->body.size() > kMaxBody)
      std::abort();
  }
  close(fds[0]);
  close(fds[1]);
  return 0;
}
