// The rules a CPU profile's fields follow beyond JSON's types, and errors naming FILE:LINE:COLUMN
// and the field's path.
//
// The profile parser reads each field through ProfileFields with the field's path
// ("lwp.max_events"): required and unknown keys, integers in a range given as numbers or "0x…"
// strings, booleans, strings. On a wrong type, an out-of-range value, an unknown or missing key it
// throws ProfileFields::Failure carrying the finished one-line message, whose line and column
// locate_json_path() finds in the text (only then). Failure never leaves the profile API:
// parse_profile() catches it and returns the message (errors are values there).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "vmm/json/json_text.h"

namespace vmm {

class ProfileFields {
 public:
  struct Failure {
    std::string message;  // "FILE:LINE:COLUMN: text"
  };
  using Json = nlohmann::json;

  // `text` is the JSON the fields were read from; it must outlive this object.
  ProfileFields(std::string_view source_name, std::string_view text)
      : source_(source_name), text_(text) {}

  static std::string child(std::string_view path, std::string_view key) {
    return json_child_path(path, key);
  }
  static std::string element(std::string_view path, size_t index) {
    return json_element_path(path, index);
  }

  // "FILE:LINE:COLUMN" of the key or element at `path`.
  std::string locate(std::string_view path) const;
  [[noreturn]] void fail(std::string_view path, std::string_view message) const;

  void expect_object(const Json& v, std::string_view path) const;
  void expect_array(const Json& v, std::string_view path) const;
  // Rejects the first key of `obj` (in text order) that is not in `known`, at that key's position.
  void check_keys(const Json& obj, std::string_view path,
                  const std::vector<std::string_view>& known) const;

  // The member `key` of `obj`, or nullptr when the key is absent.
  static const Json* optional(const Json& obj, std::string_view key);
  // As optional(), but a JSON null also counts as absent (for sections that may be null).
  static const Json* nullable(const Json& obj, std::string_view key);
  // The member `key`, or a "missing required key" failure at the object `path`.
  const Json& required(const Json& obj, std::string_view path, std::string_view key) const;

  // The key of `obj` (at `path`) that comes first in the text among those `accept` takes, if
  // any: for errors, which should name the first. With one, the text is parsed once more.
  std::optional<std::string> first_key_in_text(
      const Json& obj, std::string_view path,
      const std::function<bool(const std::string&)>& accept) const;

  // A non-negative integer given as a JSON number or a "0x…" hex string, within [lo, hi].
  // `hex` only chooses how the range is printed in the error.
  uint64_t unsigned_value(const Json& v, std::string_view path, uint64_t lo, uint64_t hi,
                          bool hex = false) const;
  bool boolean(const Json& v, std::string_view path) const;
  std::string string(const Json& v, std::string_view path) const;

  // "boolean true", "string \"abc\"": how a wrong value is quoted back to the user.
  static std::string describe_value(const Json& v);
  static std::string hex(uint64_t v);

 private:
  std::string source_;
  std::string_view text_;
};

}  // namespace vmm
