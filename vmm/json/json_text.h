// JSON from outside the process (CPU profiles, snapshot manifests, migration hellos, API bodies),
// read by nlohmann's own SAX parser with limits, and errors that say where.
//
// nlohmann::json::parse has no depth or size limit (a 400 000-deep manifest crashed a reader
// that walked it) and keeps the last of two equal keys silently. read_json_text() runs the same
// parser through a SAX handler that builds the document itself and refuses those. Positions come
// from public API only: nlohmann's parse_error reports the byte offset of a syntax error, and the
// text is fed through an iterator that notes how far the parser has read, which places a key or
// element when a later check (a profile field out of range) needs its line and column: that
// check names the field's path, and locate_json_path() reads the text once more to find it.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "vmm/result.h"

namespace vmm {

struct JsonLimits {
  size_t max_bytes = 0;                 // longest text accepted
  size_t max_depth = 0;                 // most objects and arrays open at once
  bool duplicate_keys_allowed = false;  // false: a repeated key in one object is an error
};

// The document, or a usage error "LINE:COLUMN: what" at the byte the error points at (after the
// last byte when the text ends too soon): "1:7: JSON syntax error while parsing value - ...",
// "3:12: duplicate key ...", "1:1: the JSON text is N bytes, over the limit of M".
Result<nlohmann::json> read_json_text(std::string_view text, const JsonLimits& limits);

// "LINE:COLUMN" (1-based, columns in bytes) of byte `offset` of `text`.
std::string line_column(std::string_view text, size_t offset);

// Paths are spelt as profile errors spell them: "lwp.max_events", "cpuid_overrides[0].leaf", ""
// for the top-level value.
std::string json_child_path(std::string_view path, std::string_view key);
std::string json_element_path(std::string_view path, size_t index);

// Offset of the first byte of the key (its opening quote) or array element at `path`, in text
// order; a path the text does not have gives its nearest enclosing one's ("lwp.x" -> "lwp" ->
// ""), the top-level value gives its first byte. Meant for error messages: it parses `text`
// again (which must be JSON that read_json_text accepted).
size_t locate_json_path(std::string_view text, std::string_view path);

// The first key, in text order, of the object at `object_path` that `accept` takes; nullopt when
// it takes none. One more parse of `text`, as above: for an error that names the first wrong key.
std::optional<std::string> first_json_key(std::string_view text, std::string_view object_path,
                                          const std::function<bool(const std::string&)>& accept);

}  // namespace vmm
