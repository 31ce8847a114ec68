// The API socket (DESIGN §4.10): HTTP/1.1 + JSON on a Unix socket, paths and bodies after Cloud
// Hypervisor's REST API, served on threads of its own (an acceptor and kWorkerThreads workers;
// the HTTP parsing is http_wire.h's). The server checks every
// request (route, method, body) and hands the VM only well-formed calls (vm_api.h).
//
// Routes: GET /api/v1/vmm.ping, GET vm.info, PUT vm.pause, PUT vm.resume,
// PUT vm.snapshot {"destination_url":"file:///DIR"},
// PUT vm.send-migration {"destination_url":"unix:/PATH"}, PUT vm.shutdown, GET vm.pmu.
//
// Every response carries a JSON object. Success: 200 and the VmApi's body ({} when it has
// nothing to say). Errors: {"error": "one-line reason"} with
//   400 malformed HTTP, body not JSON / not an object, unknown keys (named), destination_url
//       missing, not a string or of the wrong scheme, a body sent to a GET;
//   404 unknown path;  405 wrong method (with an Allow header);
//   411 a chunked body, a PUT without Content-Length;  413 a body larger than kMaxBodyBytes;
//   414 a request target over 8 KiB;  415 a Content-Encoding;  431 headers over 80 KiB;
//   500 the VmApi threw (its what());
//   and whatever 4xx/5xx the VmApi returns (e.g. 409).
// One request per connection (the response says Connection: close). A client that stalls,
// sends garbage or hangs up mid-request costs one worker thread at most kIoTimeoutSeconds (for
// the whole request, and again for the answer) and never reaches the VM.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "vmm/api/vm_api.h"
#include "vmm/result.h"

namespace vmm::api {

class ApiServer {
 public:
  static constexpr size_t kMaxBodyBytes = 64 * 1024;
  static constexpr int kIoTimeoutSeconds = 5;  // reading a request; writing its answer

  // Serves `vm` at `socket_path` once started. `vm` must outlive the server.
  ApiServer(std::string socket_path, VmApi& vm);
  ~ApiServer();  // stop()
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Creates the socket (mode 0600) and starts serving; returns a one-line reason instead when it
  // cannot: another process listens at the path, something that is not a socket is there, the
  // path is too long for a Unix socket, bind fails. A stale socket file (nobody listening) is
  // replaced. Ignores SIGPIPE for the whole process: a client that hangs up must cost a write
  // an EPIPE, not kill the VMM. Call once.
  Status start();

  // Stops accepting, waits for the requests in progress (a VmApi call, or a slow client for up
  // to kIoTimeoutSeconds), then removes the socket file if it is still the one start() made.
  // Idempotent. Not from inside a VmApi call: it would wait for itself.
  void stop();

  const std::string& socket_path() const;

  // Why start() would refuse `path` (another process listens there, it is not a socket, it is
  // too long), looked at without changing anything: a destination of a live migration asks
  // before it accepts a VM it could not serve.
  static Status unusable_path(const std::string& path);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vmm::api
