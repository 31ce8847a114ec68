// The tokens of a JSON text with their byte offsets, read by nlohmann::json's own lexer.
//
// nlohmann's SAX interface says what was parsed but not where (in 3.11.2 only parse_error gets a
// position). Its lexer, nlohmann::detail::lexer, does know: after each scan() its position's
// chars_read_total is the offset just past the token (corrected for the one character a number
// reads ahead). Running that same lexer over the text once gives every token's extent, and
// because json::sax_parse drives an identical lexer over the same bytes, the parser's SAX events
// arrive in the order of these tokens (json_document.cc pairs them). No JSON is tokenised here by
// hand: the lexer decides what a token is; we only note where it starts.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

namespace vmm {

enum class JsonTokenKind {
  kBeginObject,     // {
  kEndObject,       // }
  kBeginArray,      // [
  kEndArray,        // ]
  kNameSeparator,   // :
  kValueSeparator,  // ,
  kString,
  kNumber,
  kTrue,
  kFalse,
  kNull,
  kEndOfInput,      // the end of the text, or a NUL byte (nlohmann stops there)
};

// True for the tokens that begin a value (and for strings, also an object key): each of them
// produces exactly one SAX event (start_object, start_array, key/string, number_*, boolean, null).
bool starts_value(JsonTokenKind kind);

struct JsonToken {
  JsonTokenKind kind = JsonTokenKind::kEndOfInput;
  size_t begin = 0;  // offset of its first byte
  size_t end = 0;    // the lexer's chars_read_total after it: one past its last byte
                     // (for kEndOfInput one past the end of the text)
};

// The token the lexer could not read.
struct JsonLexError {
  size_t token_begin = 0;  // where that token starts
  size_t offending = 0;    // the byte the lexer stopped at; text.size() when the text ended early
};

struct JsonTokens {
  std::vector<JsonToken> tokens;     // in text order, up to kEndOfInput or the error
  std::optional<JsonLexError> error;
};

// Lexes the whole text (comments are not JSON and are not accepted, as in json::parse).
JsonTokens lex_json(std::string_view text);

}  // namespace vmm
