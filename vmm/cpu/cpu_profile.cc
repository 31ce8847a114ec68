// The public profile API: shipped profiles (embedded at build time by //vmm/profiles), files,
// and the `--cpu NAME|FILE` rule. Parsing itself is profile_parser.cc.
#include "vmm/cpu/cpu_profile.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "vmm/cpu/profile_parser.h"
#include "vmm/profiles/builtin_profiles.h"
#include "vmm/result.h"

namespace vmm {
namespace {

const profiles::BuiltinProfileText* find_builtin(std::string_view name) {
  for (const profiles::BuiltinProfileText& p : profiles::builtin_profile_texts())
    if (p.name == name) return &p;
  return nullptr;
}

bool looks_like_path(std::string_view arg) {
  return arg.find('/') != std::string_view::npos ||
         (arg.size() > 5 && arg.substr(arg.size() - 5) == ".json");
}

std::string joined_builtin_names() {
  std::string s;
  for (const std::string& n : builtin_profile_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

ProfileLookup builtin_lookup() {
  return [](std::string_view name) -> std::optional<NamedProfileText> {
    const profiles::BuiltinProfileText* p = find_builtin(name);
    if (p == nullptr) return std::nullopt;
    return NamedProfileText{std::string(p->file_name), std::string(p->text)};
  };
}

Result<CpuProfile> parse_profile(std::string_view text, std::string_view source_name,
                                 const ProfileLookup& lookup) {
  detail::ParseContext ctx{lookup, {}};
  return detail::parse_in_context(text, source_name, {}, ctx);
}

Result<CpuProfile> parse_embedded_profile(std::string_view text, std::string_view source_name) {
  const ProfileLookup lookup = builtin_lookup();
  detail::ParseContext ctx{lookup, {}, /*files_allowed=*/false};
  return detail::parse_in_context(text, source_name, {}, ctx);
}

Result<CpuProfile> load_profile_file(const std::string& path) {
  const Result<std::string> text = detail::read_text_file(path);
  if (!text.ok()) return Error::usage(path + ": cannot read CPU profile: " + text.error().message);
  const ProfileLookup lookup = builtin_lookup();
  detail::ParseContext ctx{lookup, {}};
  return detail::parse_in_context(text.value(), path, {detail::file_key(path)}, ctx);
}

Result<CpuProfile> builtin_profile(std::string_view name) {
  const profiles::BuiltinProfileText* p = find_builtin(name);
  if (p == nullptr)
    return Error::usage("unknown CPU profile '" + std::string(name) +
                        "' (shipped: " + joined_builtin_names() + ")");
  const ProfileLookup lookup = builtin_lookup();
  detail::ParseContext ctx{lookup, {}};
  Result<CpuProfile> r =
      detail::parse_in_context(p->text, p->file_name, {"name:" + std::string(name)}, ctx);
  // The generator names each embedded profile after its file; the JSON must agree.
  if (r.ok() && r->name != name)
    return Error::usage(std::string(p->file_name) + ": declares name '" + r->name +
                        "', expected '" + std::string(name) + "'");
  return r;
}

std::vector<std::string> builtin_profile_names() {
  std::vector<std::string> names;
  for (const profiles::BuiltinProfileText& p : profiles::builtin_profile_texts())
    names.emplace_back(p.name);
  std::sort(names.begin(), names.end());
  return names;
}

Result<CpuProfile> resolve_cpu_option(std::string_view name_or_path) {
  if (!looks_like_path(name_or_path) && find_builtin(name_or_path) != nullptr)
    return builtin_profile(name_or_path);
  const std::string path(name_or_path);
  std::error_code ec;
  // A bare word that is neither a shipped name nor a file was most likely a mistyped name.
  if (!looks_like_path(name_or_path) && !std::filesystem::exists(path, ec))
    return Error::usage("unknown CPU profile '" + path + "': not a shipped profile (" +
                        joined_builtin_names() + ") and no such file");
  return load_profile_file(path);
}

}  // namespace vmm
