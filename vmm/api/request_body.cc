#include "vmm/api/request_body.h"

#include "vmm/json/json_text.h"
#include "vmm/result.h"

namespace vmm::api {
namespace {

Result<RequestBody> check_destination_url(const ApiRoute& route, const nlohmann::json& object) {
  const std::string example = std::string(route.destination_scheme) +
                              (route.destination_scheme == "file://" ? "/DIR" : "/PATH");
  auto it = object.find("destination_url");
  if (it == object.end())
    return Error::usage(std::string(route.name) + " needs \"destination_url\": \"" + example +
                        "\"");
  if (!it->is_string())
    return Error::usage(std::string("destination_url must be a string like \"") + example + "\"");
  const std::string& url = it->get_ref<const std::string&>();
  // An absolute path, so the VMM does not resolve it against a working directory the caller
  // cannot see; no NUL, which would cut the path short at the system call.
  const size_t scheme = route.destination_scheme.size();
  if (!url.starts_with(route.destination_scheme) || url.size() <= scheme || url[scheme] != '/' ||
      url.find('\0') != std::string::npos)
    return Error::usage("destination_url of " + std::string(route.name) + " must be \"" + example +
                        "\" (an absolute path), not " + nlohmann::json(url).dump());
  return RequestBody{url, std::nullopt};
}

}  // namespace

Result<nlohmann::json> parse_json_body(std::string_view text) {
  // Bodies are flat objects; deeper nesting is refused as it is read. The HTTP layer bounds the
  // size already (kMaxBodyBytes); the limit here repeats it for callers that did not come that
  // way.
  constexpr JsonLimits kLimits{.max_bytes = 1 << 20, .max_depth = 16};
  Result<nlohmann::json> parsed = read_json_text(text, kLimits);
  if (!parsed.ok()) return parsed.error().prefixed("body at ");
  return parsed;
}

Result<RequestBody> check_request_body(const ApiRoute& route, std::string_view body) {
  if (route.method == "GET") {
    if (!body.empty()) return Error::usage(std::string(route.name) + " takes no body");
    return RequestBody{};
  }
  // No body at all reads as {}: then vm.snapshot says what it needs, not that "" is not JSON.
  auto parsed = body.empty() ? nlohmann::json::object() : parse_json_body(body);
  if (!parsed.ok()) return parsed.error();
  const nlohmann::json& object = parsed.value();
  if (!object.is_object())
    return Error::usage(std::string("body must be a JSON object, not ") + object.type_name());

  std::string unknown;
  for (const auto& [key, value] : object.items()) {
    if (!route.destination_scheme.empty() && key == "destination_url") continue;
    if (route.verb == ApiVerb::kSendMigration && key == "deadline_ms") continue;
    unknown += (unknown.empty() ? "" : ", ") + nlohmann::json(key).dump();
  }
  if (!unknown.empty())
    return Error::usage("unknown key(s) in the body of " + std::string(route.name) + ": " +
                        unknown);

  if (route.destination_scheme.empty()) return RequestBody{};
  auto checked = check_destination_url(route, object);
  if (!checked.ok()) return checked;
  if (auto it = object.find("deadline_ms"); it != object.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() < RequestBody::kMinDeadlineMs ||
        it->get<int64_t>() > RequestBody::kMaxDeadlineMs)
      return Error::usage("deadline_ms must be an integer from " +
                          std::to_string(RequestBody::kMinDeadlineMs) + " to " +
                          std::to_string(RequestBody::kMaxDeadlineMs) + ", not " + it->dump());
    checked.value().deadline_ms = static_cast<int>(it->get<int64_t>());
  }
  return checked;
}

}  // namespace vmm::api
