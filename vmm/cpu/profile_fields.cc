#include "vmm/cpu/profile_fields.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <utility>

namespace vmm {

std::string ProfileFields::locate(std::string_view path) const {
  return source_ + ":" + line_column(text_, locate_json_path(text_, path));
}

void ProfileFields::fail(std::string_view path, std::string_view message) const {
  throw Failure{locate(path) + ": " + std::string(message)};
}

static std::string object_name(std::string_view path) {
  return path.empty() ? std::string("the profile") : std::string(path);
}

void ProfileFields::expect_object(const Json& v, std::string_view path) const {
  if (!v.is_object())
    fail(path, object_name(path) + " must be an object, got " + describe_value(v));
}

void ProfileFields::expect_array(const Json& v, std::string_view path) const {
  if (!v.is_array()) fail(path, std::string(path) + " must be an array, got " + describe_value(v));
}

void ProfileFields::check_keys(const Json& obj, std::string_view path,
                               const std::vector<std::string_view>& known) const {
  // nlohmann keeps keys sorted, not in text order: report the unknown key that comes first in
  // the text, which is the one a reader fixing errors top to bottom expects.
  const std::optional<std::string> unknown =
      first_key_in_text(obj, path, [&](const std::string& key) {
        return std::find(known.begin(), known.end(), key) == known.end();
      });
  if (!unknown) return;
  std::string list;
  for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
  fail(child(path, *unknown),
       "unknown key '" + *unknown + "' in " + object_name(path) + " (known keys: " + list + ")");
}

std::optional<std::string> ProfileFields::first_key_in_text(
    const Json& obj, std::string_view path,
    const std::function<bool(const std::string&)>& accept) const {
  bool any = false;
  for (const auto& [key, value] : obj.items()) any = any || accept(key);
  if (!any) return std::nullopt;  // the usual case: no second parse
  return first_json_key(text_, path, accept);
}

const ProfileFields::Json* ProfileFields::optional(const Json& obj, std::string_view key) {
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

const ProfileFields::Json* ProfileFields::nullable(const Json& obj, std::string_view key) {
  const Json* v = optional(obj, key);
  return v == nullptr || v->is_null() ? nullptr : v;
}

const ProfileFields::Json& ProfileFields::required(const Json& obj, std::string_view path,
                                                   std::string_view key) const {
  const Json* v = optional(obj, key);
  if (v == nullptr)
    fail(path, "missing required key '" + std::string(key) + "' in " + object_name(path));
  return *v;
}

std::string ProfileFields::hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Parses "0x" followed by 1..16 hex digits; nullopt for anything else.
static std::optional<uint64_t> parse_hex_string(const std::string& s) {
  if (s.size() < 3 || s.size() > 18 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X'))
    return std::nullopt;
  uint64_t v = 0;
  for (size_t i = 2; i < s.size(); ++i) {
    const char c = s[i];
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return std::nullopt;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

uint64_t ProfileFields::unsigned_value(const Json& v, std::string_view path, uint64_t lo,
                                       uint64_t hi, bool print_hex) const {
  auto show = [&](uint64_t x) { return print_hex ? hex(x) : std::to_string(x); };
  auto range = [&] { return lo == hi ? show(lo) : show(lo) + ".." + show(hi); };
  const std::string p(path);
  uint64_t value = 0;
  if (v.is_number_unsigned()) {
    value = v.get<uint64_t>();
  } else if (v.is_number_integer()) {  // only negative integers land here
    fail(path, p + " must be " + range() + ", got " + std::to_string(v.get<int64_t>()));
  } else if (v.is_string()) {
    const std::optional<uint64_t> parsed = parse_hex_string(v.get<std::string>());
    if (!parsed)
      fail(path, p + " must be an integer or a \"0x\" hex string, got " + describe_value(v));
    value = *parsed;
  } else {
    fail(path, p + " must be an integer or a \"0x\" hex string, got " + describe_value(v));
  }
  if (value < lo || value > hi) fail(path, p + " must be " + range() + ", got " + show(value));
  return value;
}

bool ProfileFields::boolean(const Json& v, std::string_view path) const {
  if (!v.is_boolean())
    fail(path, std::string(path) + " must be true or false, got " + describe_value(v));
  return v.get<bool>();
}

std::string ProfileFields::string(const Json& v, std::string_view path) const {
  if (!v.is_string()) fail(path, std::string(path) + " must be a string, got " + describe_value(v));
  return v.get<std::string>();
}

std::string ProfileFields::describe_value(const Json& v) {
  std::string text = v.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "boolean " + text;
    case Json::value_t::string: return "string " + text;
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    default: return "number " + text;
  }
}

}  // namespace vmm
