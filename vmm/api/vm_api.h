// What the API socket (DESIGN §4.10) asks of the VMM. ApiServer speaks HTTP and checks every
// request; the VMM implements this interface and only ever sees well-formed calls. Keeping it
// abstract lets the server be tested with a fake VM, without KVM.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace vmm::api {

// One answer. `status` is an HTTP status: 200 for success, with `body` a JSON object (null
// is sent as {}; every response of the API socket carries a JSON object, never 204). For a
// refusal, a 4xx/5xx status (409 when the VM's state forbids the call, e.g. resume of a running
// VM) and `body` {"error": "one-line reason"}; a body without a string "error" is wrapped.
struct ApiResponse {
  int status = 200;
  nlohmann::json body = nlohmann::json::object();
};

// A refusal: `status` (4xx/5xx) with {"error": reason}.
inline ApiResponse error_response(int status, std::string reason) {
  return ApiResponse{status, nlohmann::json{{"error", std::move(reason)}}};
}

// Threading: ApiServer calls these on one of its own threads (never the VM's, never the thread
// that started the server), one call at a time: a call does not begin before the previous one
// returned — except send_migration, which may run beside any other call (a migration takes
// seconds to minutes, and the API answers during it: DESIGN §4.12). An implementation keeps the
// calls that come during a migration from touching the VM the migration holds. An exception thrown
// here becomes a 500 response with its what(); the server keeps serving. Do not call
// ApiServer::stop() from inside a call (stop() waits for the call in progress).
class VmApi {
 public:
  virtual ~VmApi() = default;

  // GET /api/v1/vmm.ping: {"version": "..."}, answered even when the VM is paused.
  virtual ApiResponse ping() = 0;
  // GET /api/v1/vm.info: the VM's configuration and state.
  virtual ApiResponse info() = 0;
  // PUT /api/v1/vm.pause, vm.resume: stop / restart every vCPU.
  virtual ApiResponse pause() = 0;
  virtual ApiResponse resume() = 0;
  // PUT /api/v1/vm.snapshot: write a snapshot. `destination_url` is "file://" + an absolute
  // directory path (checked by the server).
  virtual ApiResponse snapshot(const std::string& destination_url) = 0;
  // PUT /api/v1/vm.send-migration: migrate to a `pmuvm run --incoming` waiting on
  // `destination_url`, "unix:" + a socket path (checked by the server); `deadline_ms` as the
  // body gave it, or none for the default.
  virtual ApiResponse send_migration(const std::string& destination_url,
                                     std::optional<int> deadline_ms) = 0;
  // PUT /api/v1/vm.shutdown: end the run.
  virtual ApiResponse shutdown() = 0;
  // GET /api/v1/vm.pmu: per-vCPU LWP and NetBurst state.
  virtual ApiResponse pmu() = 0;
};

}  // namespace vmm::api
