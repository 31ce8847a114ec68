// JSON from outside the process (snapshot manifests, migration hellos, API bodies) parsed with a
// nesting limit. nlohmann's parse callback sees the depth of every value as it is read; past the
// limit parsing stops at once (JsonTooDeep), before anything recurses through the text — its
// dump(), readers walking it (a 400 000-deep profile crashed the manifest reader).
#pragma once

#include <cstddef>

#include <nlohmann/json.hpp>

namespace vmm {

struct JsonTooDeep {};

// A parser callback for nlohmann::json::parse that throws JsonTooDeep at the first value nested
// in more than `levels` arrays and objects.
inline nlohmann::json::parser_callback_t json_nesting_limit(size_t levels) {
  return [levels](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (static_cast<size_t>(depth) >= levels) throw JsonTooDeep{};
    return true;
  };
}

}  // namespace vmm
