#include "vmm/counting/counting_choice.h"

#include <fstream>

#include "guest/abi/pmuvm_abi.h"
#include "vmm/host/perf_host_counters.h"

namespace vmm {
namespace {

std::string paranoid_note(const HostCapabilities& host) {
  if (!host.perf_event_paranoid) return "";
  return "; perf_event_paranoid is " + std::to_string(*host.perf_event_paranoid);
}

// Every stepper counts identically (tests/e2e). auto = kvm (block stepping): on SVM and VMX
// hosts KVM's debug exits stop at every CPL and need nothing from the guest kernel.
StepperKind resolved(StepperKind s) { return s == StepperKind::kAuto ? StepperKind::kKvm : s; }

// The backend, before the stepper is checked against the guest.
Result<CountingChoice> choose_backend(const CountingRequest& request,
                                      const std::function<HostCapabilities()>& probe) {
  const StepperKind stepper = resolved(request.stepper);
  const bool double_asked = request.host_counters == HostCountersKind::kDouble;
  if (request.backend == BackendKind::kPrecise) {
    if (request.host_counters_given || request.double_skid_given || request.skid_margin_given)
      return Error::usage(std::string(
          "--host-counters, --double-skid and --skid-margin are options of the host backend "
          "(--backend host), not of --backend precise"));
    return CountingChoice{.stepper = stepper, .host = std::nullopt, .why = "requested"};
  }
  if (request.double_skid_given && !double_asked)
    return Error::usage(std::string("--double-skid goes with --host-counters double"));
  if (double_asked && request.backend != BackendKind::kHost)
    return Error::usage(std::string("--host-counters double goes with --backend host"));
  if (stepper == StepperKind::kGuest || stepper == StepperKind::kEmulate) {
    const std::string name = stepper_name(stepper);
    if (request.backend == BackendKind::kHost)
      return Error::usage(
          "--backend host steps up to each event with the KVM stepper: it cannot go with "
          "--stepper " +
          name);
    return CountingChoice{.stepper = stepper,
                          .host = std::nullopt,
                          .why = "auto: --stepper " + name + " counts with the precise backend"};
  }
  HostBackendChoice host{.double_skid = request.double_skid,
                         .free_run = {.skid_margin = request.skid_margin}};
  if (double_asked) {
    host.counter_double = true;
    host.free_run.count_branches = true;
    host.free_run.count_conditional_branches = true;
    return CountingChoice{.stepper = stepper,
                          .host = host,
                          .why = "requested, with the counter double instead of the host PMU"};
  }
  const HostCapabilities capabilities = probe();
  if (capabilities.instructions_missing) {
    const std::string missing = "the host PMU cannot count guest instructions (" +
                                *capabilities.instructions_missing + paranoid_note(capabilities) +
                                ")";
    if (request.backend == BackendKind::kHost)
      return Error::usage(
          "--backend host: " + missing +
          "; `perf stat -e instructions:uG -- true` shows whether this host can, and "
          "--host-counters double runs the host backend without a PMU");
    return CountingChoice{.stepper = stepper, .host = std::nullopt, .why = "auto: " + missing};
  }
  host.free_run.count_branches = !capabilities.branches_missing;
  host.free_run.count_conditional_branches = !capabilities.conditional_branches_missing;
  std::string counts = "instructions";
  std::string stepped;
  auto kind = [&](const std::optional<std::string>& missing, const std::string& name) {
    if (!missing)
      counts += ", " + name;
    else
      stepped += "; not " + name + " (" + *missing + "): " + name + " events are stepped";
  };
  kind(capabilities.branches_missing, "branches");
  kind(capabilities.conditional_branches_missing, "conditional branches");
  return CountingChoice{
      .stepper = stepper,
      .host = host,
      .why = std::string(request.backend == BackendKind::kHost ? "requested" : "auto") +
             ": the host PMU counts guest " + counts + stepped};
}

}  // namespace

HostCapabilities HostCapabilities::probe() {
  HostCapabilities host;
  host.instructions_missing = PerfHostCounters::instructions_unavailable();
  host.branches_missing = PerfHostCounters::branches_unavailable();
  host.conditional_branches_missing = PerfHostCounters::conditional_branches_unavailable();
  int paranoid = 0;
  if (std::ifstream in("/proc/sys/kernel/perf_event_paranoid"); in >> paranoid)
    host.perf_event_paranoid = paranoid;
  return host;
}

CountingChoice CountingChoice::resumed(StepperKind stepper) {
  return CountingChoice{
      .stepper = resolved(stepper), .host = std::nullopt, .why = "as the snapshot's manifest says"};
}

bool CountingChoice::kvm_stepping() const {
  return stepper == StepperKind::kKvm || stepper == StepperKind::kKvmSingle ||
         stepper == StepperKind::kEmulate;
}

uint32_t CountingChoice::pv_features() const {
  switch (stepper) {
    case StepperKind::kGuest:
      return PMUVM_PV_CONSOLE | PMUVM_PV_USER_ENTRY | PMUVM_PV_GUEST_STEPPER;
    // The KVM stepper finds the kernel's returns to user mode itself (DESIGN §4.7).
    case StepperKind::kKvm:
    case StepperKind::kKvmSingle:
    case StepperKind::kEmulate: return PMUVM_PV_CONSOLE;
    // The block console is always offered (Linux guests do not look).
    case StepperKind::kAuto:
    case StepperKind::kNone: break;
  }
  return PMUVM_PV_CONSOLE | PMUVM_PV_USER_ENTRY;
}

std::string CountingChoice::describe() const {
  const std::string stepper_text = kind_entry(kStepperNames, stepper).description;
  if (!host) return "counting backend: precise, " + stepper_text + " stepper (" + why + ")";
  if (host->counter_double)
    return "counting backend: host with the counter double (overflows " +
           std::to_string(host->double_skid) + " instruction(s) late), skid margin " +
           std::to_string(host->free_run.skid_margin) + ", " + stepper_text + " stepper (" + why +
           ")";
  return "counting backend: host PMU counters, skid margin " +
         std::to_string(host->free_run.skid_margin) + ", " + stepper_text + " stepper (" + why +
         ")";
}

Result<CountingChoice> choose_counting(const CountingRequest& request,
                                       const std::function<HostCapabilities()>& probe) {
  if (request.stepper == StepperKind::kNone)
    return Error::usage(std::string("--stepper none is not a choice: every run counts"));
  Result<CountingChoice> choice = choose_backend(request, probe);
  if (choice.error_message()) return choice;
  if (request.linux_guest && choice.value().stepper == StepperKind::kGuest)
    return Error::usage(std::string(
        "--stepper guest needs the bundled kernel's help; a Linux guest is counted with "
        "--stepper kvm (the default)"));
  return choice;
}

}  // namespace vmm
