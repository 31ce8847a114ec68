#include "vmm/api/api_client.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "vmm/api/api_routes.h"
#include "vmm/api/http_wire.h"
#include "vmm/api/request_body.h"
#include "vmm/api/unix_socket_probe.h"
#include "vmm/unix_connect.h"

namespace vmm::api {
namespace {

ApiCallResult failure(ApiCallResult::Outcome outcome, std::string error) {
  ApiCallResult r;
  r.outcome = outcome;
  r.error = std::move(error);
  return r;
}

// An answer larger than this is not pmuvm's (vm.pmu's report is the largest, far below).
constexpr size_t kMaxAnswerBytes = size_t{64} << 20;
constexpr int kConnectTimeoutSeconds = 5;

// The reason a connect failed, in the words of the socket probe (a regular file at the path
// refuses the connection like a stale socket does; the probe tells them apart).
std::string connect_failure_reason(const std::string& path, int connect_errno) {
  SocketProbe probe = probe_unix_socket(path);
  switch (probe.state) {
    case SocketProbe::State::kNotSocket: return "not a socket";
    case SocketProbe::State::kListening: return std::strerror(connect_errno);  // it came back
    default: return probe.error;
  }
}

// A connected socket, or the reason there is none.
Result<int> connect_to(const std::string& path) {
  const UnixConnection c = connect_unix(path, kConnectTimeoutSeconds * 1000);
  if (c.fd >= 0) return c.fd;
  if (c.error == EAGAIN)
    return Error::vmm("the server accepted no connection within " +
                      std::to_string(kConnectTimeoutSeconds) + " s");
  if (c.error == EACCES)  // nothing was sent to it
    return Error::vmm("the server runs as uid " + std::to_string(c.peer_uid) +
                      ", neither this user nor root: not talking to it");
  return Error::vmm(connect_failure_reason(path, c.error));
}

}  // namespace

ApiCallResult call_api(const std::string& socket_path, const std::string& verb,
                       const std::optional<std::string>& body, std::chrono::seconds timeout) {
  using Outcome = ApiCallResult::Outcome;
  const ApiRoute* route = find_route_by_name(verb);
  if (!route)
    return failure(Outcome::kUsageError,
                   "unknown verb \"" + verb + "\" (verbs: " + route_names() + ")");
  if (body && route->method == "GET") return failure(Outcome::kUsageError, verb + " takes no body");
  if (body) {
    auto parsed = parse_json_body(*body);
    if (auto* reason = parsed.error_message()) return failure(Outcome::kUsageError, *reason);
  }
  if (socket_path.size() > kMaxUnixSocketPath)
    return failure(Outcome::kNoResponse, "cannot connect to " + socket_path +
                                             ": path longer than " +
                                             std::to_string(kMaxUnixSocketPath) + " bytes");

  auto connected = connect_to(socket_path);
  if (auto* reason = connected.error_message())
    return failure(Outcome::kNoResponse, "cannot connect to " + socket_path + ": " + *reason);
  const int fd = connected.value();
  // What Cloud Hypervisor's clients send as the Host of a Unix socket.
  std::string request = std::string(route->method) + " " + route->path() +
                        " HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n";
  if (route->method == "PUT")
    request += "Content-Type: application/json\r\nContent-Length: " +
               std::to_string(body.value_or("").size()) + "\r\n";
  request += "Connection: close\r\n\r\n" + body.value_or("");
  auto exchanged =
      exchange(fd, request, std::chrono::steady_clock::now() + timeout, kMaxAnswerBytes);
  ::close(fd);
  if (auto* reason = exchanged.error_message())
    return failure(Outcome::kNoResponse, socket_path + ": no answer to " + verb + ": " + *reason);
  HttpResponse& response = exchanged.value();

  ApiCallResult r;
  r.outcome = Outcome::kResponse;
  r.status = response.status;
  if (!response.body.empty()) {
    auto parsed = parse_json_body(response.body);
    if (!parsed.ok())
      return failure(Outcome::kNoResponse, socket_path + ": the answer to " + verb +
                                               " is not JSON (HTTP " + std::to_string(r.status) +
                                               ")");
    r.body = std::move(parsed).value();
  }
  if (r.status >= 300) {
    const nlohmann::json* error =
        r.body.is_object() && r.body.contains("error") ? &r.body["error"] : nullptr;
    r.error = error && error->is_string() ? error->get<std::string>()
              : r.body.is_null()
                  ? std::string("(no reason given)")
                  : r.body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return r;
}

}  // namespace vmm::api
