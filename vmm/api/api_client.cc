#include "vmm/api/api_client.h"

#include <httplib.h>

#include "vmm/api/api_routes.h"
#include "vmm/api/request_body.h"
#include "vmm/api/unix_socket_probe.h"

namespace vmm::api {
namespace {

ApiCallResult failure(ApiCallResult::Outcome outcome, std::string error) {
  ApiCallResult r;
  r.outcome = outcome;
  r.error = std::move(error);
  return r;
}

// httplib says only "Connection" when connect fails; connecting again ourselves gives errno.
std::string connect_failure_reason(const std::string& path, httplib::Error error) {
  SocketProbe probe = probe_unix_socket(path);
  switch (probe.state) {
    case SocketProbe::State::kNotSocket: return "not a socket";
    case SocketProbe::State::kListening: return httplib::to_string(error);  // it came back
    default: return probe.error;
  }
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
    if (auto* reason = std::get_if<std::string>(&parsed))
      return failure(Outcome::kUsageError, *reason);
  }
  if (socket_path.size() > kMaxUnixSocketPath)
    return failure(Outcome::kNoResponse, "cannot connect to " + socket_path +
                                             ": path longer than " +
                                             std::to_string(kMaxUnixSocketPath) + " bytes");

  // For AF_UNIX httplib takes the host as the socket path and ignores the port.
  httplib::Client client(socket_path, 1);
  client.set_address_family(AF_UNIX);
  client.set_connection_timeout(5);
  client.set_write_timeout(5);
  client.set_read_timeout(timeout.count());
  // httplib would name the socket path as the host; this is what Cloud Hypervisor's clients send.
  const httplib::Headers headers = {{"Host", "localhost"}};
  const std::string path = route->path();
  httplib::Result result =
      route->method == "GET"
          ? client.Get(path.c_str(), headers)
          : client.Put(path.c_str(), headers, body.value_or(""), "application/json");
  if (!result) {
    if (result.error() == httplib::Error::Connection)
      return failure(Outcome::kNoResponse, "cannot connect to " + socket_path + ": " +
                                               connect_failure_reason(socket_path, result.error()));
    return failure(Outcome::kNoResponse, socket_path + ": no answer to " + verb + ": " +
                                             httplib::to_string(result.error()));
  }

  ApiCallResult r;
  r.outcome = Outcome::kResponse;
  r.status = result->status;
  if (!result->body.empty()) {
    auto parsed = parse_json_body(result->body);
    if (std::holds_alternative<std::string>(parsed))
      return failure(Outcome::kNoResponse, socket_path + ": the answer to " + verb +
                                               " is not JSON (HTTP " + std::to_string(r.status) +
                                               ")");
    r.body = std::move(std::get<nlohmann::json>(parsed));
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
