// The migration baseline of several resolved profiles (DESIGN §1 and §4.10, proposal §5.1: "the
// logical AND of the available feature bits and the minimum of the number of events over all
// processors in the migration set"). A `baseline_of` profile file uses it, and so does
// `pmuvm profiles --baseline`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "vmm/cpu/cpu_profile.h"
#include "vmm/result.h"

namespace vmm {

// The baseline of `members` (at least one), named "baseline-of-<member names joined by '-'>"
// ("baseline-of-N-profiles" when that would exceed a profile name's 64 characters), with
// `baseline_of` = the members' names and an empty `source`. Errors are one line without a
// position: there is no text to point into.
Result<CpuProfile> compute_baseline(const std::vector<CpuProfile>& members);

namespace detail {

// Fills everything of `out` but name, description, source and baseline_of from `members`
// (at least one): LWP = pmu::lwp::baseline(), enable policy = AND of the members' policies within
// what the baseline offers, NetBurst = present only if every member has it (minimum of each
// parameter); identity, brand, CPUID overrides, MISC_ENABLE and cache = the first member's.
// Fails (usage) with why the result is invalid.
Status compose_baseline(const std::vector<CpuProfile>& members, CpuProfile& out);

}  // namespace detail
}  // namespace vmm
