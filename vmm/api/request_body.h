// Checks a request's body against its route before anything reaches the VM: the server turns
// each reason returned here into a 400, so a VmApi implementation only ever sees a
// destination_url of the right scheme.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "vmm/api/api_routes.h"
#include "vmm/result.h"

namespace vmm::api {

// What a checked body carried. `destination_url` is set for the routes that take one
// (vm.snapshot: "file:///DIR", vm.send-migration: "unix:/PATH"), empty otherwise.
struct RequestBody {
  std::string destination_url;
  // vm.send-migration's optional "deadline_ms" (kMinDeadlineMs..kMaxDeadlineMs): how long the
  // source waits for each answer and for its paused phase (migration_source.h).
  std::optional<int> deadline_ms;
  static constexpr int kMinDeadlineMs = 100;
  static constexpr int kMaxDeadlineMs = 3'600'000;
};

// `text` parsed, or the one-line reason it is not JSON ("body is not valid JSON: ..."); shared
// with `pmuvm ctl`, which refuses to send what the server would refuse to read.
Result<nlohmann::json> parse_json_body(std::string_view text);

// A GET takes no body. A PUT takes nothing, or a JSON object holding exactly the route's keys:
// none, or "destination_url", a string of the route's scheme followed by an absolute path
// (vm.send-migration: and optionally "deadline_ms", an integer in range).
// Returns the body, or a one-line reason naming what is wrong (unknown keys by name).
Result<RequestBody> check_request_body(const ApiRoute& route, std::string_view body);

}  // namespace vmm::api
