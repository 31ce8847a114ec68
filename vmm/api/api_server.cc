#include "vmm/api/api_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "vmm/api/api_routes.h"
#include "vmm/api/http_wire.h"
#include "vmm/api/request_body.h"
#include "vmm/api/unix_socket_probe.h"
#include "vmm/unix_connect.h"

namespace vmm::api {
namespace {

// Enough that a stalled client does not hold up a ping; VmApi calls are serialized anyway.
constexpr size_t kWorkerThreads = 4;
// Connections accepted and waiting for a worker; more are closed at once (a client that opens
// connections in a loop costs file descriptors only up to here).
constexpr size_t kMaxWaitingConnections = 64;
// What a client may still send after an answer to a request that was not read to its end
// (a refused body, a 413) before the connection is closed on it.
constexpr size_t kMaxDrainBytes = 16 << 20;

// An answer, and the headers beside it (Allow with a 405).
struct Answer {
  ApiResponse response;
  HttpHeaders headers;
};

// Error messages quote what clients sent, which need not be UTF-8: replace, never throw.
std::string to_text(const nlohmann::json& body) {
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The conventions of api_server.h, whatever the VmApi returned: success is 200 with an object,
// an error is 4xx/5xx with a string "error".
ApiResponse normalize(const ApiRoute& route, ApiResponse r) {
  if (r.status != 200 && (r.status < 400 || r.status > 599))
    return error_response(
        500, std::string(route.name) + " answered with HTTP status " + std::to_string(r.status));
  if (r.status == 200) {
    if (r.body.is_null()) r.body = nlohmann::json::object();
    return r;
  }
  if (!r.body.is_object() || !r.body.contains("error") || !r.body["error"].is_string())
    r.body = nlohmann::json{{"error", r.body.is_string() ? r.body.get<std::string>()
                                      : r.body.is_null() ? std::string(route.name) + " failed"
                                                         : to_text(r.body)}};
  return r;
}

// Bodies for the errors found while reading a request, before it has a route.
std::string reason_for_status(int status) {
  switch (status) {
    case 400: return "malformed HTTP request";
    case 413:
      return "request body larger than " + std::to_string(ApiServer::kMaxBodyBytes) + " bytes";
    case 414: return "request target too long";
    case 431: return "request headers too large";
    default: return "HTTP error " + std::to_string(status);
  }
}

}  // namespace

Status ApiServer::unusable_path(const std::string& path) {
  if (path.empty()) return Error::usage("API socket path is empty");
  if (path.size() > kMaxUnixSocketPath)
    return Error::usage("API socket path " + path + " is longer than " +
                        std::to_string(kMaxUnixSocketPath) + " bytes (the limit of a Unix socket)");
  SocketProbe probe = probe_unix_socket(path);
  switch (probe.state) {
    case SocketProbe::State::kAbsent:
    case SocketProbe::State::kStale: return {};
    case SocketProbe::State::kListening:
      return Error::usage("API socket " + path + ": another process is listening on it");
    case SocketProbe::State::kNotSocket:
      return Error::usage("API socket " + path + " exists and is not a socket");
    case SocketProbe::State::kError: break;
  }
  return Error::usage("API socket " + path + ": " + probe.error);
}

namespace {

// Makes `path` free for bind: nothing there, or a stale socket (its VMM died) that is removed.
// A live socket or anything else is left alone.
Status claim_socket_path(const std::string& path) {
  if (Status usable = ApiServer::unusable_path(path); !usable.ok()) return usable;
  // Usable: nothing there (ENOENT), or a stale socket.
  if (unlink(path.c_str()) != 0 && errno != ENOENT)
    return Error::vmm("API socket " + path +
                      ": cannot remove the stale socket: " + std::strerror(errno));
  return {};
}

}  // namespace

struct ApiServer::Impl {
  Impl(std::string p, VmApi& v) : path(std::move(p)), vm(v) {}

  void accept_loop();
  void work();
  void serve(int fd);
  std::optional<Answer> screen(const HttpHead& head);
  ApiResponse handle(const HttpRequest& request);
  ApiResponse call_vm(const ApiRoute& route, const RequestBody& body);
  void close_fds();

  const std::string path;
  VmApi& vm;
  std::mutex vm_mutex;  // one VmApi call at a time, send_migration aside (vm_api.h)
  int listen_fd = -1;
  int stop_fd = -1;  // an eventfd, readable from stop() on: every wait of the server ends
  std::thread acceptor;
  std::vector<std::thread> workers;
  std::mutex queue_mutex;
  std::condition_variable queue_changed;
  std::deque<int> waiting;  // accepted connections, oldest first
  bool stopping = false;    // under queue_mutex
  bool started = false;
  dev_t socket_dev = 0;  // the socket file start() made, so stop() removes only that one
  ino_t socket_ino = 0;
};

// Runs before any body byte is read: refuses what must not be read (unknown routes, wrong
// methods, chunked, unsized or compressed bodies, a body on a GET).
std::optional<Answer> ApiServer::Impl::screen(const HttpHead& head) {
  auto refuse = [](int status, std::string reason, HttpHeaders headers = {}) {
    return Answer{error_response(status, std::move(reason)), std::move(headers)};
  };
  const ApiRoute* route = find_route_by_path(head.path);
  if (!route)
    return refuse(404, "no endpoint " + head.path + " (endpoints: " +
                           std::string(ApiRoute::kPathPrefix) + "{" + route_names() + "})");
  if (head.method != route->method)
    return refuse(
        405,
        std::string(route->name) + " takes " + std::string(route->method) + ", not " + head.method,
        {{"Allow", std::string(route->method)}});
  if (head.chunked || head.header("Transfer-Encoding"))
    return refuse(411, "send the body with a Content-Length (Transfer-Encoding is not accepted)");
  // Without a length a body would end only when the client closes.
  if (route->method == "PUT" && !head.content_length)
    return refuse(411, "send a Content-Length (Content-Length: 0 for no body)");
  // Requests are small JSON: no encoding is accepted (a compressed body would be small on the
  // wire and unbounded once inflated).
  if (head.header("Content-Encoding"))
    return refuse(415, "Content-Encoding is not accepted (send plain JSON)");
  if (route->method == "GET" && head.content_length.value_or(0) != 0)
    return refuse(400, std::string(route->name) + " takes no body");
  return std::nullopt;
}

ApiResponse ApiServer::Impl::handle(const HttpRequest& request) {
  const ApiRoute& route = *find_route_by_path(request.head.path);  // screen() let only routes in
  auto body = check_request_body(route, request.body);
  if (const auto* reason = body.error_message()) return error_response(400, *reason);
  return normalize(route, call_vm(route, body.value()));
}

ApiResponse ApiServer::Impl::call_vm(const ApiRoute& route, const RequestBody& body) {
  // A migration takes seconds to minutes; the calls that come meanwhile are answered (vm_api.h).
  std::unique_lock lock(vm_mutex, std::defer_lock);
  if (route.verb != ApiVerb::kSendMigration) lock.lock();
  try {
    switch (route.verb) {
      case ApiVerb::kPing: return vm.ping();
      case ApiVerb::kInfo: return vm.info();
      case ApiVerb::kPause: return vm.pause();
      case ApiVerb::kResume: return vm.resume();
      case ApiVerb::kSnapshot: return vm.snapshot(body.destination_url);
      case ApiVerb::kSendMigration:
        return vm.send_migration(body.destination_url, body.deadline_ms);
      case ApiVerb::kShutdown: return vm.shutdown();
      case ApiVerb::kPmu: return vm.pmu();
    }
  } catch (const std::exception& e) {
    return error_response(500, std::string(route.name) + " failed: " + e.what());
  } catch (...) {
    return error_response(500, std::string(route.name) + " failed: unknown exception");
  }
  return error_response(500, std::string(route.name) + " is not implemented");
}

// One connection: one request, one answer, closed.
void ApiServer::Impl::serve(int fd) {
  auto deadline = [] {
    return std::chrono::steady_clock::now() + std::chrono::seconds(kIoTimeoutSeconds);
  };
  std::optional<Answer> refusal;
  IncomingRequest in = read_request(fd, stop_fd, deadline(), {.max_body_bytes = kMaxBodyBytes},
                                    [&](const HttpHead& head) {
                                      refusal = screen(head);
                                      return !refusal;
                                    });
  Answer answer;
  switch (in.outcome) {
    case IncomingRequest::Outcome::kGone: ::close(fd); return;
    case IncomingRequest::Outcome::kBadHttp:
      answer.response = error_response(in.status, reason_for_status(in.status));
      break;
    case IncomingRequest::Outcome::kScreenedOut: answer = std::move(*refusal); break;
    case IncomingRequest::Outcome::kComplete:
      // A request must never end the VMM: anything handle() throws (it should throw nothing)
      // is this request's 500, and the worker serves on.
      try {
        answer.response = handle(in.request);
      } catch (const std::exception& e) {
        answer.response = error_response(500, std::string("internal error: ") + e.what());
      }
      break;
  }
  const bool head_only = in.request.head.method == "HEAD";
  send_all(fd,
           format_response(answer.response.status, answer.headers, "application/json",
                           to_text(answer.response.body), head_only),
           deadline());
  if (in.fully_read)
    ::close(fd);
  else
    drain_then_close(fd, stop_fd, deadline(), kMaxDrainBytes);
}

void ApiServer::Impl::accept_loop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[1].revents) return;
    if (!(fds[0].revents & POLLIN)) continue;
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of file descriptors: the pending connection stays in the backlog; try again a
      // little later instead of spinning on a listener that stays readable.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        pollfd stop{stop_fd, POLLIN, 0};
        ::poll(&stop, 1, 100);
      }
      continue;
    }
    // The API pauses, snapshots and migrates the VM: only this user or root may ask
    // (vmm/unix_connect.h); anyone else is closed on without an answer.
    if (!peer_is_trusted(fd)) {
      ::close(fd);
      continue;
    }
    std::lock_guard lock(queue_mutex);
    if (waiting.size() >= kMaxWaitingConnections) {
      ::close(fd);
      continue;
    }
    waiting.push_back(fd);
    queue_changed.notify_one();
  }
}

void ApiServer::Impl::work() {
  for (;;) {
    int fd;
    {
      std::unique_lock lock(queue_mutex);
      queue_changed.wait(lock, [this] { return stopping || !waiting.empty(); });
      if (stopping) return;
      fd = waiting.front();
      waiting.pop_front();
    }
    serve(fd);
  }
}

void ApiServer::Impl::close_fds() {
  for (int* fd : {&listen_fd, &stop_fd})
    if (*fd >= 0) {
      ::close(*fd);
      *fd = -1;
    }
}

ApiServer::ApiServer(std::string socket_path, VmApi& vm)
    : impl_(std::make_unique<Impl>(std::move(socket_path), vm)) {}

ApiServer::~ApiServer() { stop(); }

const std::string& ApiServer::socket_path() const { return impl_->path; }

Status ApiServer::start() {
  Impl& s = *impl_;
  if (s.started) return Error::vmm("API socket " + s.path + ": already started");
  if (Status claimed = claim_socket_path(s.path); !claimed.ok()) return claimed;

  std::signal(SIGPIPE, SIG_IGN);
  auto failure = [&s](const std::string& what) {
    const Error reason =
        Error::vmm("API socket " + s.path + ": " + what + ": " + std::strerror(errno));
    s.close_fds();
    return reason;
  };
  s.listen_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s.listen_fd < 0) return failure("socket");
  s.stop_fd = ::eventfd(0, EFD_CLOEXEC);
  if (s.stop_fd < 0) return failure("eventfd");
  // The socket file is born with the socket's inode mode less the umask, so no other user can
  // connect even between bind and the chmod below (which restores what a umask took).
  ::fchmod(s.listen_fd, 0600);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, s.path.c_str(), s.path.size() + 1);  // unusable_path: it fits
  if (::bind(s.listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return failure("cannot bind");
  struct stat st;
  if (lstat(s.path.c_str(), &st) == 0) {
    s.socket_dev = st.st_dev;
    s.socket_ino = st.st_ino;
  }
  for (auto [step, ok] : {std::pair{"chmod 0600", ::chmod(s.path.c_str(), 0600) == 0},
                          std::pair{"listen", ::listen(s.listen_fd, 64) == 0}})
    if (!ok) {
      const Error reason = failure(step);
      ::unlink(s.path.c_str());
      return reason;
    }
  s.started = true;
  s.stopping = false;
  s.acceptor = std::thread([&s] { s.accept_loop(); });
  for (size_t i = 0; i < kWorkerThreads; ++i) s.workers.emplace_back([&s] { s.work(); });
  return {};
}

void ApiServer::stop() {
  Impl& s = *impl_;
  if (!s.started) return;
  s.started = false;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t written = ::write(s.stop_fd, &one, sizeof one);
  if (s.acceptor.joinable()) s.acceptor.join();
  {
    std::lock_guard lock(s.queue_mutex);
    s.stopping = true;
  }
  s.queue_changed.notify_all();
  for (std::thread& worker : s.workers) worker.join();
  s.workers.clear();
  for (int fd : s.waiting) ::close(fd);
  s.waiting.clear();
  s.close_fds();
  // Removes the socket file this server made, not one a newer VMM made at the same path since.
  // Some file systems (virtio-9p, where the nested KVM host's /tmp lives) report no stable inode
  // for a socket file: there, a socket file nobody listens on any more is ours to remove.
  struct stat st;
  if (lstat(s.path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return;
  const bool same_file = st.st_dev == s.socket_dev && st.st_ino == s.socket_ino && st.st_ino != 0;
  if (same_file || probe_unix_socket(s.path).state == SocketProbe::State::kStale)
    unlink(s.path.c_str());
}

}  // namespace vmm::api
