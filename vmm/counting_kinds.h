// The choices of how a run counts (DESIGN §4.7, §4.11), each an enum whose `auto` is a value of
// its own, and their names: the only spelling of each, read by the command line, a snapshot's
// manifest ("machine.stepper"), vm.info and the log.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace vmm {

enum class BackendKind {
  kAuto,     // host where the host PMU counts guest instructions, else precise
  kPrecise,  // every counted instruction seen by a stepper
  kHost,     // host counters between event boundaries, the KVM stepper up to each
};

enum class StepperKind {
  kAuto,       // kvm
  kKvm,        // KVM debug exits, every CPL, blocks where it can
  kKvmSingle,  // the same, one exit per instruction (the cross-check)
  kEmulate,    // kvm, with counted user code run by an embedded TCG where only counts matter
  kGuest,      // the bundled kernel single-steps its profiled tasks and reports each step
  kNone,       // no counting (LWP state only, no records): a manifest may name it
};

enum class HostCountersKind {
  kPerf,    // the host PMU through perf_event_open
  kDouble,  // a test double that needs no PMU (vmm/host/skidding_counter_double.h)
};

template <typename Kind>
struct KindName {
  Kind kind;
  const char* name;         // on the command line and in a manifest
  const char* description;  // in the log
};

inline constexpr std::array<KindName<BackendKind>, 3> kBackendNames{{
    {BackendKind::kPrecise, "precise", "precise"},
    {BackendKind::kHost, "host", "host"},
    {BackendKind::kAuto, "auto", "auto"},
}};
// The steppers the command line offers are those before "none".
inline constexpr std::array<KindName<StepperKind>, 6> kStepperNames{{
    {StepperKind::kKvm, "kvm", "KVM block-step"},
    {StepperKind::kKvmSingle, "kvm-single", "KVM single-step"},
    {StepperKind::kEmulate, "emulate", "emulating"},
    {StepperKind::kGuest, "guest", "guest-assisted"},
    {StepperKind::kAuto, "auto", "auto"},
    {StepperKind::kNone, "none", "no"},
}};
inline constexpr std::array<KindName<HostCountersKind>, 2> kHostCountersNames{{
    {HostCountersKind::kPerf, "perf", "host PMU"},
    {HostCountersKind::kDouble, "double", "counter double"},
}};

template <typename Kind, size_t N>
const KindName<Kind>& kind_entry(const std::array<KindName<Kind>, N>& names, Kind kind) {
  for (const KindName<Kind>& n : names)
    if (n.kind == kind) return n;
  return names.back();
}
template <typename Kind, size_t N>
std::optional<Kind> parse_kind(const std::array<KindName<Kind>, N>& names, std::string_view s) {
  for (const KindName<Kind>& n : names)
    if (s == n.name) return n.kind;
  return std::nullopt;
}
inline const char* stepper_name(StepperKind kind) { return kind_entry(kStepperNames, kind).name; }
inline std::optional<StepperKind> parse_stepper(std::string_view name) {
  return parse_kind(kStepperNames, name);
}

}  // namespace vmm
