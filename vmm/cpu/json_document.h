// A JSON text parsed by nlohmann::json, with the source position of every key and array element.
//
// nlohmann::json::sax_parse runs nlohmann's parser and reports what it read through a SAX
// handler; ours hands each event on to nlohmann's own DOM builder, and pairs it with the token
// the same lexer read for it (json_tokens.h) to learn where it starts. Two things nlohmann
// accepts are refused here: duplicate keys (JSON keeps only the last one silently, and in a
// hand-edited profile a repeated key is almost always a mistake) and nesting deeper than
// kMaxJsonDepth (no profile needs it, and paths of deeper values would cost quadratic memory).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "vmm/cpu/json_positions.h"
#include "vmm/cpu/text_position.h"

namespace vmm {

inline constexpr size_t kMaxJsonDepth = 256;
// Longest path whose position is recorded: a longer one (a long key, or values below it) takes
// its nearest recorded parent's. Without it a long key over a long array recorded the key once
// per element, memory and time quadratic in the text.
inline constexpr size_t kMaxPositionPath = 512;

struct JsonTextError {
  TextPosition position;
  std::string message;  // "JSON syntax error: ...", "duplicate key ...", ...
};

struct JsonDocument {
  nlohmann::json root;      // valid only without error
  JsonPositions positions;  // keys and elements read before any error
  std::optional<JsonTextError> error;
};

// Parses `text` (a UTF-8 byte-order mark is skipped). The first problem in text order wins:
// a syntax error, else the first duplicate key.
JsonDocument read_json_document(std::string_view text);

}  // namespace vmm
