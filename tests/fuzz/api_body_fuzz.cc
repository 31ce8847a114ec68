// libFuzzer target for the API socket's request bodies (vmm/api/request_body.h): anyone who can
// connect sends them (DESIGN §4.12). Byte 0 picks the route (vm.info, vm.snapshot, ...), the rest
// is the body, which check_request_body must refuse with a reason or accept. Checked: an accepted
// destination_url always has the route's scheme and an absolute path (what MachineApi relies on),
// and a route without one never returns one.
// Seeds (corpus_api_body/): the bodies `pmuvm ctl` sends, and near misses.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <variant>

#include "vmm/api/api_routes.h"
#include "vmm/api/request_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const auto routes = vmm::api::api_routes();
  const vmm::api::ApiRoute& route = routes[data[0] % routes.size()];
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  auto checked = vmm::api::check_request_body(route, body);
  const auto* accepted = checked.ok() ? &checked.value() : nullptr;
  if (!accepted) return 0;
  const std::string_view url = accepted->destination_url;
  const std::string_view scheme = route.destination_scheme;
  if (scheme.empty()
          ? !url.empty()
          : !url.starts_with(scheme) || url.size() <= scheme.size() || url[scheme.size()] != '/')
    std::abort();
  return 0;
}
