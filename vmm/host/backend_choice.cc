#include "vmm/host/backend_choice.h"

#include <fstream>

#include "vmm/host/perf_host_counters.h"
#include "vmm/result.h"

namespace vmm {
namespace {

std::string paranoid_note(const HostCapabilities& host) {
  if (!host.perf_event_paranoid) return "";
  return "; perf_event_paranoid is " + std::to_string(*host.perf_event_paranoid);
}

}  // namespace

HostCapabilities HostCapabilities::probe() {
  HostCapabilities host;
  host.instructions_missing = PerfHostCounters::instructions_unavailable();
  host.branches_missing = PerfHostCounters::branches_unavailable();
  int paranoid = 0;
  if (std::ifstream in("/proc/sys/kernel/perf_event_paranoid"); in >> paranoid)
    host.perf_event_paranoid = paranoid;
  return host;
}

Result<BackendChoice> choose_backend(const BackendRequest& request, const HostCapabilities& host) {
  const bool double_asked = request.host_counters == "double";
  if (request.backend == "precise") {
    if (request.host_counters_given || request.double_skid_given || request.skid_margin_given)
      return Error::usage(std::string(
          "--host-counters, --double-skid and --skid-margin are options of the host backend "
          "(--backend host), not of --backend precise"));
    return BackendChoice{.why = "requested"};
  }
  if (request.double_skid_given && !double_asked)
    return Error::usage(std::string("--double-skid goes with --host-counters double"));
  if (double_asked && request.backend != "host")
    return Error::usage(std::string("--host-counters double goes with --backend host"));
  if (request.stepper == "guest") {
    if (request.backend == "host")
      return Error::usage(std::string(
          "--backend host steps up to each event with the KVM stepper: it cannot go with "
          "--stepper guest"));
    return BackendChoice{.why = "auto: --stepper guest counts with the precise backend"};
  }
  if (double_asked)
    return BackendChoice{.host = true,
                         .counter_double = true,
                         .count_branches = true,
                         .why = "requested, with the counter double instead of the host PMU"};
  if (host.instructions_missing) {
    const std::string missing = "the host PMU cannot count guest instructions (" +
                                *host.instructions_missing + paranoid_note(host) + ")";
    if (request.backend == "host")
      return Error::usage(
          "--backend host: " + missing +
          "; `perf stat -e instructions:uG -- true` shows whether this host can, and "
          "--host-counters double runs the host backend without a PMU");
    return BackendChoice{.why = "auto: " + missing};
  }
  BackendChoice choice;
  choice.host = true;
  choice.count_branches = !host.branches_missing;
  choice.why = std::string(request.backend == "host" ? "requested" : "auto") +
               ": the host PMU counts guest instructions" +
               (host.branches_missing
                    ? ", not branches (" + *host.branches_missing + "): branch events are stepped"
                    : " and branches");
  return choice;
}

}  // namespace vmm
