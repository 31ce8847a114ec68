// `pmuvm profiles`: list the shipped CPU profiles, describe one, print a migration set's
// baseline (--baseline) or a migration verdict (--check-migration), DESIGN §4.5 and §4.10.
// Separate from main.cc so tests can run every mode without a process.
#pragma once

#include <ostream>

#include "vmm/cli/command_line.h"

namespace vmm {

// Writes results to `out` and one-line errors ("pmuvm: ...") to `err`; returns the exit status:
// 0, 1 for a refused migration, 2 for a usage error (e.g. an unknown profile), 3 when libvirt
// fails or disagrees with the baseline.
int run_profiles_command(const ProfilesCommand& cmd, std::ostream& out, std::ostream& err);

}  // namespace vmm
