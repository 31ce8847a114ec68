#include "vmm/api/http_wire.h"
#include "vmm/result.h"

#include <http_parser.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <strings.h>

namespace vmm::api {
namespace {

constexpr size_t kReadChunk = 16 * 1024;

bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

// Milliseconds to `deadline` for poll(), at least 0.
int ms_until(Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 60 * 60 * 1000));
}

// Bytes from `fd` into `buf`: > 0 read, 0 closed, -1 error, deadline or stop.
ssize_t read_some(int fd, int stop_fd, Deadline deadline, char* buf, size_t size) {
  for (;;) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    const int ready = ::poll(fds, stop_fd >= 0 ? 2 : 1, ms_until(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return -1;
    if (ready == 0) {
      errno = ETIMEDOUT;
      return -1;
    }
    if (stop_fd >= 0 && fds[1].revents) {
      errno = ECANCELED;
      return -1;
    }
    const ssize_t n = ::recv(fd, buf, size, 0);
    if (n < 0 && errno == EINTR) continue;
    return n;
  }
}

// One message parsed from the bytes it is fed: http-parser's callbacks gather the pieces.
class MessageParser {
 public:
  explicit MessageParser(http_parser_type type) {
    http_parser_init(&parser_, type);
    parser_.data = this;
    http_parser_settings_init(&settings_);
    settings_.on_url = [](http_parser* p, const char* at, size_t n) {
      return self(p).append_url(at, n);
    };
    settings_.on_header_field = [](http_parser* p, const char* at, size_t n) {
      MessageParser& m = self(p);
      if (!m.in_field_) m.head_.headers.emplace_back();
      m.in_field_ = true;
      m.head_.headers.back().first.append(at, n);
      return 0;
    };
    settings_.on_header_value = [](http_parser* p, const char* at, size_t n) {
      MessageParser& m = self(p);
      m.in_field_ = false;
      m.head_.headers.back().second.append(at, n);
      return 0;
    };
    settings_.on_headers_complete = [](http_parser* p) { return self(p).headers_complete(); };
    settings_.on_body = [](http_parser* p, const char* at, size_t n) {
      MessageParser& m = self(p);
      if (m.body_.size() + n > m.max_body_) return m.fail(413);
      m.body_.append(at, n);
      return 0;
    };
    settings_.on_message_complete = [](http_parser* p) {
      self(p).complete_ = true;
      return 0;
    };
  }
  MessageParser(const MessageParser&) = delete;
  MessageParser& operator=(const MessageParser&) = delete;

  // Called once the head is known; false stops the parse (screened out).
  std::function<bool(const HttpHead&)> on_head;
  size_t max_target_ = SIZE_MAX;
  uint64_t max_body_ = UINT64_MAX;

  // Feeds bytes (an empty span: the peer closed); false once the message is broken or refused.
  bool feed(const char* data, size_t n) {
    http_parser_execute(&parser_, &settings_, data, n);
    return HTTP_PARSER_ERRNO(&parser_) == HPE_OK;
  }
  bool complete() const { return complete_; }
  bool head_done() const { return head_done_; }
  bool screened_out() const { return screened_out_; }
  // The status that answers a broken request: a limit's own, else 400.
  int failure_status() const {
    if (fail_status_) return fail_status_;
    return HTTP_PARSER_ERRNO(&parser_) == HPE_HEADER_OVERFLOW ? 431 : 400;
  }
  const http_parser& raw() const { return parser_; }
  HttpHead& head() { return head_; }
  std::string& body() { return body_; }

 private:
  static MessageParser& self(http_parser* p) { return *static_cast<MessageParser*>(p->data); }

  int fail(int status) {
    fail_status_ = status;
    return 1;
  }

  int append_url(const char* at, size_t n) {
    if (head_.target.size() + n > max_target_) return fail(414);
    head_.target.append(at, n);
    return 0;
  }

  int headers_complete() {
    head_done_ = true;
    // http-parser takes a line without a version for HTTP/0.9: that is not a request here.
    if (parser_.http_major != 1) {
      fail_status_ = 400;
      return -1;
    }
    if (parser_.type == HTTP_REQUEST) {
      head_.method = http_method_str(static_cast<http_method>(parser_.method));
      http_parser_url url;
      http_parser_url_init(&url);
      if (http_parser_parse_url(head_.target.data(), head_.target.size(), 0, &url) == 0 &&
          (url.field_set & (1 << UF_PATH)))
        head_.path = head_.target.substr(url.field_data[UF_PATH].off, url.field_data[UF_PATH].len);
      else
        head_.path = head_.target;
    }
    head_.chunked = parser_.flags & F_CHUNKED;
    if (parser_.flags & F_CONTENTLENGTH) head_.content_length = parser_.content_length;
    if (on_head && !on_head(head_)) {
      screened_out_ = true;
      return -1;  // http-parser: an error that stops the parse
    }
    if (head_.content_length && *head_.content_length > max_body_) {
      fail_status_ = 413;
      return -1;  // (1 would mean "no body" to http-parser)
    }
    return 0;
  }

  http_parser parser_;
  http_parser_settings settings_;
  HttpHead head_;
  std::string body_;
  bool in_field_ = false;
  bool head_done_ = false;
  bool complete_ = false;
  bool screened_out_ = false;
  int fail_status_ = 0;
};

}  // namespace

const std::string* HttpHead::header(std::string_view name) const {
  for (const auto& [n, v] : headers)
    if (same_name(n, name)) return &v;
  return nullptr;
}

IncomingRequest read_request(int fd, int stop_fd, Deadline deadline, const RequestLimits& limits,
                             const std::function<bool(const HttpHead&)>& screen) {
  IncomingRequest in;
  MessageParser parser(HTTP_REQUEST);
  parser.max_target_ = limits.max_target_bytes;
  parser.max_body_ = limits.max_body_bytes;
  bool continue_asked = false;
  parser.on_head = [&](const HttpHead& head) {
    if (!screen(head)) return false;
    const std::string* expect = head.header("Expect");
    continue_asked = expect && same_name(*expect, "100-continue");
    return true;
  };
  char buf[kReadChunk];
  bool continue_sent = false;
  while (!parser.complete()) {
    const ssize_t n = read_some(fd, stop_fd, deadline, buf, sizeof buf);
    if (n <= 0) return in;  // kGone
    if (!parser.feed(buf, static_cast<size_t>(n)) && !parser.complete()) {
      if (parser.screened_out()) {
        in.outcome = IncomingRequest::Outcome::kScreenedOut;
        in.request.head = std::move(parser.head());
      } else {
        in.outcome = IncomingRequest::Outcome::kBadHttp;
        in.status = parser.failure_status();
      }
      return in;
    }
    if (continue_asked && !continue_sent && !parser.complete()) {
      continue_sent = true;
      if (!send_all(fd, "HTTP/1.1 100 Continue\r\n\r\n", deadline)) return in;
    }
  }
  in.outcome = IncomingRequest::Outcome::kComplete;
  in.request.head = std::move(parser.head());
  in.request.body = std::move(parser.body());
  in.fully_read = true;
  return in;
}

std::string format_response(int status, const HttpHeaders& headers, std::string_view content_type,
                            std::string_view body, bool head_only) {
  std::string text = "HTTP/1.1 " + std::to_string(status) + " " +
                     http_status_str(static_cast<http_status>(status)) + "\r\n";
  for (const auto& [name, value] : headers) text += name + ": " + value + "\r\n";
  text += "Content-Type: ";
  text += content_type;
  text += "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  if (!head_only) text += body;
  return text;
}

bool send_all(int fd, std::string_view bytes, Deadline deadline) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pfd{fd, POLLOUT, 0};
      const int ready = ::poll(&pfd, 1, ms_until(deadline));
      if (ready == 0) errno = ETIMEDOUT;
      if (ready == 0 || (ready < 0 && errno != EINTR)) return false;
      continue;
    }
    return false;
  }
  return true;
}

void drain_then_close(int fd, int stop_fd, Deadline deadline, size_t max_bytes) {
  ::shutdown(fd, SHUT_WR);
  char buf[kReadChunk];
  for (size_t drained = 0; drained < max_bytes;) {
    const ssize_t n = read_some(fd, stop_fd, deadline, buf, sizeof buf);
    if (n <= 0) break;
    drained += static_cast<size_t>(n);
  }
  ::close(fd);
}

Result<HttpResponse> exchange(int fd, std::string_view request_text, Deadline deadline,
                              size_t max_body_bytes) {
  if (!send_all(fd, request_text, deadline))
    return Error::vmm(std::string("the request could not be sent: ") + std::strerror(errno));
  MessageParser parser(HTTP_RESPONSE);
  parser.max_body_ = max_body_bytes;
  char buf[kReadChunk];
  while (!parser.complete()) {
    const ssize_t n = read_some(fd, -1, deadline, buf, sizeof buf);
    if (n < 0)
      return Error::vmm(
          std::string(errno == ETIMEDOUT ? "no answer in time" : std::strerror(errno)));
    // n == 0: the server closed; that ends a body without a length, else the answer is cut.
    if (!parser.feed(buf, static_cast<size_t>(n)) && !parser.complete()) {
      if (parser.failure_status() == 413)
        return Error::vmm("an answer larger than " + std::to_string(max_body_bytes) + " bytes");
      return Error::vmm(std::string("not an HTTP answer (") +
                        http_errno_description(HTTP_PARSER_ERRNO(&parser.raw())) + ")");
    }
    if (n == 0 && !parser.complete())
      return Error::vmm(std::string(parser.head_done()
                                        ? "the answer was cut short"
                                        : "the connection closed without an answer"));
  }
  HttpResponse response;
  response.status = static_cast<int>(parser.raw().status_code);
  response.headers = std::move(parser.head().headers);
  response.body = std::move(parser.body());
  return response;
}

}  // namespace vmm::api
