#include "vmm/api/api_routes.h"

#include <array>

namespace vmm::api {
namespace {

// Paths and bodies after Cloud Hypervisor's REST API; vm.pmu is ours.
constexpr std::array kRoutes = {
    ApiRoute{ApiVerb::kPing, "vmm.ping", "GET", ""},
    ApiRoute{ApiVerb::kInfo, "vm.info", "GET", ""},
    ApiRoute{ApiVerb::kPause, "vm.pause", "PUT", ""},
    ApiRoute{ApiVerb::kResume, "vm.resume", "PUT", ""},
    ApiRoute{ApiVerb::kSnapshot, "vm.snapshot", "PUT", "file://"},
    ApiRoute{ApiVerb::kSendMigration, "vm.send-migration", "PUT", "unix:"},
    ApiRoute{ApiVerb::kShutdown, "vm.shutdown", "PUT", ""},
    ApiRoute{ApiVerb::kPmu, "vm.pmu", "GET", ""},
};

}  // namespace

std::span<const ApiRoute> api_routes() { return kRoutes; }

const ApiRoute* find_route_by_name(std::string_view name) {
  for (const ApiRoute& r : kRoutes)
    if (r.name == name) return &r;
  return nullptr;
}

const ApiRoute* find_route_by_path(std::string_view path) {
  if (!path.starts_with(ApiRoute::kPathPrefix)) return nullptr;
  return find_route_by_name(path.substr(ApiRoute::kPathPrefix.size()));
}

std::string route_names() {
  std::string names;
  for (const ApiRoute& r : kRoutes) {
    if (!names.empty()) names += ", ";
    names += r.name;
  }
  return names;
}

}  // namespace vmm::api
