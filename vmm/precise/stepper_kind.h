// The precise backend's steppers (DESIGN §4.7) and their names, in one table: the command line's
// --stepper, a snapshot's manifest ("machine.stepper"), vm.info and the log all read it.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace vmm {

enum class StepperKind {
  kNone,       // no counting backend (LWP state only, no records)
  kKvm,        // KVM debug exits, every CPL, blocks where it can
  kKvmSingle,  // the same, one exit per instruction (the cross-check)
  kGuest,      // the bundled kernel single-steps its profiled tasks and reports each step
};

struct StepperName {
  StepperKind kind;
  const char* name;         // on the command line and in a manifest
  const char* description;  // in the log
};

inline constexpr std::array<StepperName, 4> kStepperNames{{
    {StepperKind::kKvm, "kvm", "KVM block-step"},
    {StepperKind::kKvmSingle, "kvm-single", "KVM single-step"},
    {StepperKind::kGuest, "guest", "guest-assisted"},
    {StepperKind::kNone, "none", "no"},
}};

inline const StepperName& stepper_entry(StepperKind kind) {
  for (const StepperName& s : kStepperNames)
    if (s.kind == kind) return s;
  return kStepperNames.back();
}
inline const char* stepper_name(StepperKind kind) { return stepper_entry(kind).name; }
inline const char* stepper_description(StepperKind kind) { return stepper_entry(kind).description; }

// The stepper `name` names, or nullopt.
inline std::optional<StepperKind> parse_stepper(std::string_view name) {
  for (const StepperName& s : kStepperNames)
    if (name == s.name) return s.kind;
  return std::nullopt;
}

}  // namespace vmm
