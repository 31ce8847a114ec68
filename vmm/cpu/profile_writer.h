// A CpuProfile as JSON text in the documented schema (vmm/profiles/README.md): what
// `pmuvm profiles --baseline` prints and what a snapshot can carry as "the CPU the guest saw".
//
// The text is always a literal profile, complete and self-contained: every field is written
// out, nothing is left to defaults, and a computed baseline is written as its computed values
// (its members' names go to `computed_from`, for information only), so it reads back the same
// wherever the shipped profiles differ. parse_profile(to_profile_json(p)) == p for every p the
// parser or compute_baseline() produced, apart from `source` (where the text was read from).
// Strings must be UTF-8, as every parsed profile's are (nlohmann's lexer checks); anything else
// makes nlohmann's dump() throw nlohmann::json::type_error.
#pragma once

#include <string>

#include "vmm/cpu/cpu_profile.h"

namespace vmm {

std::string to_profile_json(const CpuProfile& profile);

}  // namespace vmm
