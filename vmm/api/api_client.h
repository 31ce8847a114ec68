// The client side of the API socket: one request, as `pmuvm ctl --api-socket PATH VERB [JSON]`
// sends it. VERB is the endpoint's name as in its path (vmm.ping, vm.info, vm.pause, vm.resume,
// vm.snapshot, vm.send-migration, vm.shutdown, vm.pmu); JSON its body, sent as given.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace vmm::api {

struct ApiCallResult {
  enum class Outcome {
    kResponse,    // the server answered: `status`, `body`
    kUsageError,  // nothing sent: unknown verb, a body that is not JSON, a body for a GET verb
    kNoResponse,  // no connection, no complete answer, or an answer that is not JSON
  } outcome = Outcome::kNoResponse;
  int status = 0;       // kResponse: the HTTP status
  nlohmann::json body;  // kResponse: the body (null when empty)
  // One line: why, for kUsageError and kNoResponse ("cannot connect to PATH: reason"); for a
  // kResponse with an error status, the body's "error".
  std::string error;
};

// How long call_api waits for an answer: a snapshot or a migration of a large guest takes a
// while, and the server answers only when it is done.
constexpr std::chrono::seconds kDefaultApiTimeout{600};

ApiCallResult call_api(const std::string& socket_path, const std::string& verb,
                       const std::optional<std::string>& body = std::nullopt,
                       std::chrono::seconds timeout = kDefaultApiTimeout);

}  // namespace vmm::api
