// Internal to //vmm/cpu: turns one profile's JSON text into a CpuProfile, resolving `baseline_of`
// members recursively. cpu_profile.cc wraps it in the public API of cpu_profile.h.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "vmm/cpu/cpu_profile.h"
#include "vmm/result.h"

namespace vmm::detail {

// Profiles being parsed right now, outermost first, so a `baseline_of` reference back into this
// chain is reported as a cycle instead of recursing forever.
struct ParseFrame {
  std::vector<std::string> keys;  // "name:amd-lwp", "file:/abs/path.json"
  std::string display;            // how the cycle message names this profile
};

struct ParseContext {
  const ProfileLookup& lookup;
  std::vector<ParseFrame> frames;
  bool files_allowed = true;  // false: baseline_of may name shipped profiles only
  // Members already parsed, by key ("name:X", "file:/path"): a member named on many paths (a
  // diamond of baselines) is parsed once, not once per path (N^depth).
  std::map<std::string, CpuProfile> resolved = {};
};

// Parses `text`. `identity_keys` are the keys under which the caller found this text (its
// lookup name and/or canonical file path); the profile's declared name is added to them.
Result<CpuProfile> parse_in_context(std::string_view text, std::string_view source_name,
                                    std::vector<std::string> identity_keys, ParseContext& context);

// "file:" key of a path, canonical so that two spellings of one file are one key.
std::string file_key(const std::string& path);
// Reads a whole file (at most a profile's size limit), or says why it cannot: the OS reason.
Result<std::string> read_text_file(const std::string& path);

}  // namespace vmm::detail
