#include "vmm/cpu/json_tokens.h"

#include <utility>

#include <nlohmann/json.hpp>

namespace vmm {
namespace {

// The adapter and lexer types json::sax_parse(first, last, ...) itself builds for a char range.
using InputAdapter = decltype(nlohmann::detail::input_adapter(std::declval<const char*>(),
                                                              std::declval<const char*>()));
using Lexer = nlohmann::detail::lexer<nlohmann::json, InputAdapter>;
using LexToken = nlohmann::detail::lexer_base<nlohmann::json>::token_type;

constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";

std::optional<JsonTokenKind> kind_of(LexToken t) {
  switch (t) {
    case LexToken::begin_object: return JsonTokenKind::kBeginObject;
    case LexToken::end_object: return JsonTokenKind::kEndObject;
    case LexToken::begin_array: return JsonTokenKind::kBeginArray;
    case LexToken::end_array: return JsonTokenKind::kEndArray;
    case LexToken::name_separator: return JsonTokenKind::kNameSeparator;
    case LexToken::value_separator: return JsonTokenKind::kValueSeparator;
    case LexToken::value_string: return JsonTokenKind::kString;
    case LexToken::value_unsigned:
    case LexToken::value_integer:
    case LexToken::value_float: return JsonTokenKind::kNumber;
    case LexToken::literal_true: return JsonTokenKind::kTrue;
    case LexToken::literal_false: return JsonTokenKind::kFalse;
    case LexToken::literal_null: return JsonTokenKind::kNull;
    case LexToken::end_of_input: return JsonTokenKind::kEndOfInput;
    default: return std::nullopt;  // parse_error (uninitialized/literal_or_value never come back)
  }
}

// JSON's four whitespace characters: exactly what the lexer's skip_whitespace() passes over
// before a token (comments are off).
bool json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

bool starts_value(JsonTokenKind kind) {
  switch (kind) {
    case JsonTokenKind::kBeginObject:
    case JsonTokenKind::kBeginArray:
    case JsonTokenKind::kString:
    case JsonTokenKind::kNumber:
    case JsonTokenKind::kTrue:
    case JsonTokenKind::kFalse:
    case JsonTokenKind::kNull: return true;
    default: return false;
  }
}

JsonTokens lex_json(std::string_view text) {
  JsonTokens out;
  Lexer lexer(nlohmann::detail::input_adapter(text.data(), text.data() + text.size()), false);
  // The lexer skips a byte-order mark before the first token; everything after a token up to the
  // next one is whitespace, so a token starts at the first non-space byte after the previous end.
  size_t previous_end = text.starts_with(kByteOrderMark) ? kByteOrderMark.size() : 0;
  for (;;) {
    const LexToken t = lexer.scan();
    const size_t end = lexer.get_position().chars_read_total;
    size_t begin = previous_end;
    while (begin < text.size() && json_space(text[begin])) ++begin;
    const std::optional<JsonTokenKind> kind = kind_of(t);
    if (!kind) {
      // chars_read_total counts the byte the lexer choked on (or the attempt to read past the end).
      out.error = JsonLexError{begin, end == 0 ? 0 : end - 1};
      return out;
    }
    out.tokens.push_back(JsonToken{*kind, begin, end});
    if (*kind == JsonTokenKind::kEndOfInput) return out;
    previous_end = end;
  }
}

}  // namespace vmm
