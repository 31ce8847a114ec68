// HTTP/1.1 on a stream socket, as the API socket speaks it (DESIGN §4.10): one request and one
// response per connection, bodies sized by Content-Length. Parsing is Node's http-parser
// (libhttp-parser, a few kB of C and no dependencies of its own); this file adds the socket
// I/O with deadlines, the limits, and the response text.
//
// Every read waits on the socket and on `stop_fd` (readable = give up now) until one deadline for
// the whole message: a client that drips bytes holds a worker no longer than one that stalls.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "vmm/result.h"

namespace vmm::api {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;
using Deadline = std::chrono::steady_clock::time_point;

// A request's line and headers, as the server screens them before it reads a body.
struct HttpHead {
  std::string method;  // "GET", "PUT", ... (http-parser knows every registered method)
  std::string target;  // as sent
  std::string path;    // the target's path: no query, no fragment
  HttpHeaders headers;
  bool chunked = false;                    // Transfer-Encoding: chunked
  std::optional<uint64_t> content_length;  // absent without a Content-Length header

  // The value of the first header called `name` (case-insensitive), or nullptr.
  const std::string* header(std::string_view name) const;
};

struct HttpRequest {
  HttpHead head;
  std::string body;
};

struct IncomingRequest {
  enum class Outcome {
    kComplete,     // `request` holds the head and the whole body
    kScreenedOut,  // the screen refused the head; no body was read
    kBadHttp,      // not HTTP, or over a limit: answer `status` (400, 413, 414, 431)
    kGone,         // the client closed, timed out, or the server is stopping: answer nothing
  } outcome = Outcome::kGone;
  HttpRequest request;      // kComplete (and kScreenedOut: the head)
  int status = 0;           // kBadHttp
  bool fully_read = false;  // false: unread bytes may follow (close gently: drain_then_close)
};

struct RequestLimits {
  uint64_t max_body_bytes;
  size_t max_target_bytes = 8 * 1024;
};

// Reads one request from `fd`. `screen` sees the head before any body byte is read and returns
// false to refuse it (the caller then answers what its screen decided). A body over
// limits.max_body_bytes is 413 without being read; a Content-Length is required for a body.
// Sends "100 Continue" when the client asks for it and the screen let the head through.
IncomingRequest read_request(int fd, int stop_fd, Deadline deadline, const RequestLimits& limits,
                             const std::function<bool(const HttpHead&)>& screen);

// "HTTP/1.1 404 Not Found\r\n" + headers + Content-Type/Length + "Connection: close" + body
// (the body left out when `head_only`, the answer to a HEAD request).
std::string format_response(int status, const HttpHeaders& headers, std::string_view content_type,
                            std::string_view body, bool head_only = false);

// Writes all of `bytes` (MSG_NOSIGNAL); false when the peer is gone or the deadline passes.
bool send_all(int fd, std::string_view bytes, Deadline deadline);

// After an answer to a request that was not read to its end: stop sending, then read and drop
// what the client still sends until it closes, the deadline passes or `max_bytes` went by. A Unix
// socket closed with unread bytes resets its peer, which could then lose the answer.
void drain_then_close(int fd, int stop_fd, Deadline deadline, size_t max_bytes);

struct HttpResponse {
  int status = 0;
  HttpHeaders headers;
  std::string body;
};

// Sends `request_text` on `fd` and reads the response until it is complete or the server closes.
// Returns a one-line reason instead when there is no whole, well-formed response by the
// deadline or it has more than `max_body_bytes` of body.
Result<HttpResponse> exchange(int fd, std::string_view request_text, Deadline deadline,
                              size_t max_body_bytes);

}  // namespace vmm::api
