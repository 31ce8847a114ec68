// The endpoints of the API socket (DESIGN §4.10), in one table that the server and `pmuvm ctl`
// both read, so a verb and its method, path and body cannot disagree between the two.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace vmm::api {

enum class ApiVerb { kPing, kInfo, kPause, kResume, kSnapshot, kSendMigration, kShutdown, kPmu };

struct ApiRoute {
  ApiVerb verb;
  std::string_view name;    // "vm.pause": the verb of `pmuvm ctl` and the path's last part
  std::string_view method;  // "GET" (no body) or "PUT" (an optional JSON object)
  // The URL scheme of the body's one required key, "destination_url"; "" when the body has no
  // keys at all (a PUT may then send nothing, or {}).
  std::string_view destination_scheme;

  std::string path() const { return std::string(kPathPrefix) + std::string(name); }

  static constexpr std::string_view kPathPrefix = "/api/v1/";
};

// Every route, in the order `pmuvm ctl --help` lists them.
std::span<const ApiRoute> api_routes();

// The route named `name` ("vm.pause") or whose path is `path` ("/api/v1/vm.pause"); nullptr
// when there is none.
const ApiRoute* find_route_by_name(std::string_view name);
const ApiRoute* find_route_by_path(std::string_view path);

// "vmm.ping, vm.info, ...": the verbs for help texts and usage errors.
std::string route_names();

}  // namespace vmm::api
