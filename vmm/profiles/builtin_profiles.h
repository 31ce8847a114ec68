// The shipped CPU profiles, compiled into the binary so `pmuvm --cpu NAME` needs no files at
// run time. builtin_profiles.cc is generated from vmm/profiles/*.json by embed_profiles.sh (a
// genrule in BUILD); this header is its only interface. Parse them with //vmm/cpu.
#pragma once

#include <span>
#include <string_view>

namespace vmm::profiles {

struct BuiltinProfileText {
  std::string_view name;       // the file name without ".json", e.g. "amd-lwp"
  std::string_view file_name;  // e.g. "amd-lwp.json" (used in error messages)
  std::string_view text;       // the file's exact bytes, so line:column in errors match the file
};

// Sorted by name.
std::span<const BuiltinProfileText> builtin_profile_texts();

}  // namespace vmm::profiles
