#include "vmm/api/api_server.h"

#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <mutex>
#include <thread>

#include "vmm/api/api_routes.h"
#include "vmm/api/request_body.h"
#include "vmm/api/unix_socket_probe.h"

namespace vmm::api {
namespace {

using httplib::Request;
using httplib::Response;
using HandlerResponse = httplib::Server::HandlerResponse;

// Enough that a stalled client does not hold up a ping; VmApi calls are serialized anyway.
constexpr size_t kWorkerThreads = 4;

// Error messages quote what clients sent, which need not be UTF-8: replace, never throw.
std::string to_text(const nlohmann::json& body) {
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void reply(Response& res, const ApiResponse& r) {
  res.status = r.status;
  res.set_content(to_text(r.body), "application/json");
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

// Bodies for the errors httplib finds before any handler runs.
std::string reason_for_status(int status) {
  switch (status) {
    case 400: return "malformed HTTP request";
    case 413:
      return "request body larger than " + std::to_string(ApiServer::kMaxBodyBytes) + " bytes";
    case 414: return "request target too long";
    default: return "HTTP error " + std::to_string(status);
  }
}

}  // namespace

std::optional<std::string> ApiServer::unusable_path(const std::string& path) {
  if (path.empty()) return "API socket path is empty";
  if (path.size() > kMaxUnixSocketPath)
    return "API socket path " + path + " is longer than " + std::to_string(kMaxUnixSocketPath) +
           " bytes (the limit of a Unix socket)";
  SocketProbe probe = probe_unix_socket(path);
  switch (probe.state) {
    case SocketProbe::State::kAbsent:
    case SocketProbe::State::kStale: return std::nullopt;
    case SocketProbe::State::kListening:
      return "API socket " + path + ": another process is listening on it";
    case SocketProbe::State::kNotSocket:
      return "API socket " + path + " exists and is not a socket";
    case SocketProbe::State::kError: break;
  }
  return "API socket " + path + ": " + probe.error;
}

namespace {

// Makes `path` free for bind: nothing there, or a stale socket (its VMM died) that is removed.
// A live socket or anything else is left alone.
std::optional<std::string> claim_socket_path(const std::string& path) {
  if (auto problem = ApiServer::unusable_path(path)) return problem;
  // Usable: nothing there (ENOENT), or a stale socket.
  if (unlink(path.c_str()) != 0 && errno != ENOENT)
    return "API socket " + path + ": cannot remove the stale socket: " + std::strerror(errno);
  return std::nullopt;
}

}  // namespace

struct ApiServer::Impl {
  Impl(std::string p, VmApi& v) : path(std::move(p)), vm(v) {}

  HandlerResponse screen(const Request& req, Response& res);
  void handle(const Request& req, Response& res);
  ApiResponse call_vm(const ApiRoute& route, const RequestBody& body);

  const std::string path;
  VmApi& vm;
  httplib::Server http;
  std::mutex vm_mutex;  // one VmApi call at a time (vm_api.h)
  std::thread thread;   // runs httplib's accept loop
  std::atomic<bool> listen_returned = false;
  bool started = false;
  dev_t socket_dev = 0;  // the socket file start() made, so stop() removes only that one
  ino_t socket_ino = 0;
};

// Runs before httplib reads a body: rejects what must not be read (unknown routes, wrong
// methods, chunked, unsized or compressed bodies, which payload_max_length does not bound)
// without reading it.
HandlerResponse ApiServer::Impl::screen(const Request& req, Response& res) {
  const ApiRoute* route = find_route_by_path(req.path);
  if (!route) {
    reply(res, error_response(404, "no endpoint " + req.path +
                                       " (endpoints: " + std::string(ApiRoute::kPathPrefix) + "{" +
                                       route_names() + "})"));
    return HandlerResponse::Handled;
  }
  if (req.method != route->method) {
    res.set_header("Allow", std::string(route->method));
    reply(res, error_response(405, std::string(route->name) + " takes " +
                                       std::string(route->method) + ", not " + req.method));
    return HandlerResponse::Handled;
  }
  if (req.has_header("Transfer-Encoding")) {
    reply(res, error_response(411,
                              "send the body with a Content-Length (Transfer-Encoding is not "
                              "accepted)"));
    return HandlerResponse::Handled;
  }
  // httplib reads a PUT without Content-Length until the client closes, without limit.
  if (route->method == "PUT" && !req.has_header("Content-Length")) {
    reply(res, error_response(411, "send a Content-Length (Content-Length: 0 for no body)"));
    return HandlerResponse::Handled;
  }
  // httplib inflates gzip and brotli bodies after payload_max_length checked the compressed
  // bytes: 64 KiB could become gigabytes. Requests are small JSON: no encoding is accepted.
  if (req.has_header("Content-Encoding")) {
    reply(res, error_response(415, "Content-Encoding is not accepted (send plain JSON)"));
    return HandlerResponse::Handled;
  }
  // httplib reads no body for a GET, so check_request_body never sees one: refuse it here.
  if (route->method == "GET" && req.has_header("Content-Length") &&
      req.get_header_value("Content-Length") != "0") {
    reply(res, error_response(400, std::string(route->name) + " takes no body"));
    return HandlerResponse::Handled;
  }
  return HandlerResponse::Unhandled;
}

void ApiServer::Impl::handle(const Request& req, Response& res) {
  const ApiRoute& route = *find_route_by_path(req.path);  // screen() let only routes through
  auto body = check_request_body(route, req.body);
  if (const auto* reason = std::get_if<std::string>(&body)) {
    reply(res, error_response(400, *reason));
    return;
  }
  reply(res, normalize(route, call_vm(route, std::get<RequestBody>(body))));
}

ApiResponse ApiServer::Impl::call_vm(const ApiRoute& route, const RequestBody& body) {
  std::lock_guard lock(vm_mutex);
  try {
    switch (route.verb) {
      case ApiVerb::kPing: return vm.ping();
      case ApiVerb::kInfo: return vm.info();
      case ApiVerb::kPause: return vm.pause();
      case ApiVerb::kResume: return vm.resume();
      case ApiVerb::kSnapshot: return vm.snapshot(body.destination_url);
      case ApiVerb::kSendMigration: return vm.send_migration(body.destination_url);
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

ApiServer::ApiServer(std::string socket_path, VmApi& vm)
    : impl_(std::make_unique<Impl>(std::move(socket_path), vm)) {}

ApiServer::~ApiServer() { stop(); }

const std::string& ApiServer::socket_path() const { return impl_->path; }

std::optional<std::string> ApiServer::start() {
  if (impl_->started) return "API socket " + impl_->path + ": already started";
  if (auto error = claim_socket_path(impl_->path)) return error;

  std::signal(SIGPIPE, SIG_IGN);
  httplib::Server& http = impl_->http;
  http.new_task_queue = [] { return new httplib::ThreadPool(kWorkerThreads); };
  http.set_address_family(AF_UNIX);
  // The socket file is born with the socket's inode mode less the umask, so no other user can
  // connect even between bind and the chmod below (which restores what a umask took).
  http.set_socket_options([](socket_t fd) { fchmod(fd, 0600); });
  http.set_read_timeout(kIoTimeoutSeconds);
  http.set_write_timeout(kIoTimeoutSeconds);
  http.set_keep_alive_timeout(kIoTimeoutSeconds);
  http.set_keep_alive_max_count(1);
  http.set_payload_max_length(kMaxBodyBytes);
  http.set_pre_routing_handler(
      [this](const Request& req, Response& res) { return impl_->screen(req, res); });
  // Every path that screen() lets through is a route; handle() dispatches on it exactly
  // (httplib's patterns are regular expressions, in which "vm.pause" would match "vmXpause").
  auto handle = [this](const Request& req, Response& res) { impl_->handle(req, res); };
  http.Get(".*", handle);
  http.Put(".*", handle);
  // httplib's own errors (400, 413, 414) come without a body: give them the JSON one.
  http.set_error_handler(httplib::Server::HandlerWithResponse([](const Request&, Response& res) {
    if (!res.body.empty()) return HandlerResponse::Unhandled;
    reply(res, error_response(res.status, reason_for_status(res.status)));
    return HandlerResponse::Handled;
  }));

  // The port means nothing for AF_UNIX, but httplib 0.11.4 takes 0 as "tell me the port",
  // which fails for a Unix socket; any other number is ignored.
  if (!http.bind_to_port(impl_->path, 1))
    return "API socket " + impl_->path + ": cannot bind: " + std::strerror(errno);
  struct stat st;
  if (lstat(impl_->path.c_str(), &st) == 0) {
    impl_->socket_dev = st.st_dev;
    impl_->socket_ino = st.st_ino;
  }
  impl_->started = true;
  impl_->thread = std::thread([impl = impl_.get()] {
    impl->http.listen_after_bind();
    impl->listen_returned = true;
  });
  // httplib's stop() does nothing before the accept loop runs: wait for it, so that a stop()
  // right after start() cannot leave the loop running forever.
  while (!http.is_running() && !impl_->listen_returned)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::optional<std::string> error;
  if (!http.is_running())
    error = "API socket " + impl_->path + ": the server did not start";
  else if (chmod(impl_->path.c_str(), 0600) != 0)
    error = "API socket " + impl_->path + ": chmod 0600: " + std::strerror(errno);
  if (error) stop();
  return error;
}

void ApiServer::stop() {
  if (!impl_->started) return;
  impl_->started = false;
  impl_->http.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  // Removes the socket file this server made, not one a newer VMM made at the same path since.
  // Some file systems (virtio-9p, where the nested KVM host's /tmp lives) report no stable inode
  // for a socket file: there, a socket file nobody listens on any more is ours to remove.
  struct stat st;
  if (lstat(impl_->path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return;
  const bool same_file = st.st_dev == impl_->socket_dev && st.st_ino == impl_->socket_ino &&
                         st.st_ino != 0;
  if (same_file || probe_unix_socket(impl_->path).state == SocketProbe::State::kStale)
    unlink(impl_->path.c_str());
}

}  // namespace vmm::api
