#include "vmm/cpu/json_syntax_error.h"

#include <cstdio>

namespace vmm {
namespace {

constexpr std::string_view kPrefix = "JSON syntax error: ";
constexpr size_t kMaxQuoted = 40;  // longer tokens are cut in messages

std::string byte_hex(unsigned char c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", c);
  return buf;
}

// The token's text as written, cut to a readable length.
std::string quote_token(std::string_view text, const JsonToken& t) {
  std::string_view s = text.substr(t.begin, t.end - t.begin);
  if (s.size() > kMaxQuoted) return std::string(s.substr(0, kMaxQuoted - 3)) + "...";
  return std::string(s);
}

std::string describe(std::string_view text, const JsonToken& t) {
  switch (t.kind) {
    case JsonTokenKind::kBeginObject: return "'{'";
    case JsonTokenKind::kEndObject: return "'}'";
    case JsonTokenKind::kBeginArray: return "'['";
    case JsonTokenKind::kEndArray: return "']'";
    case JsonTokenKind::kNameSeparator: return "':'";
    case JsonTokenKind::kValueSeparator: return "','";
    case JsonTokenKind::kString: return "string " + quote_token(text, t);
    case JsonTokenKind::kNumber: return "number " + quote_token(text, t);
    case JsonTokenKind::kTrue: return "true";
    case JsonTokenKind::kFalse: return "false";
    case JsonTokenKind::kNull: return "null";
    case JsonTokenKind::kEndOfInput: return "end of input";
  }
  return "token";
}

// What JSON's grammar allows after `previous` (nullptr: at the start) inside `container`.
// `previous_is_key`: `previous` is a string in key position, so only ':' may follow.
std::string expected_after(const JsonToken* previous, bool previous_is_key,
                           JsonContainer container) {
  if (previous == nullptr) return "a value";
  switch (previous->kind) {
    case JsonTokenKind::kBeginObject: return "a key string or '}'";
    case JsonTokenKind::kBeginArray: return "a value or ']'";
    case JsonTokenKind::kNameSeparator: return "a value";
    case JsonTokenKind::kValueSeparator:
      return container == JsonContainer::kObject ? "a key string" : "a value";
    default: break;  // a complete value: a scalar, '}' or ']'
  }
  if (previous_is_key) return "':'";
  switch (container) {
    case JsonContainer::kObject: return "',' or '}'";
    case JsonContainer::kArray: return "',' or ']'";
    case JsonContainer::kNone: return "end of input (a file holds one JSON value)";
  }
  return "a value";
}

JsonSyntaxError bad_string(std::string_view text, const JsonLexError& e) {
  if (e.offending >= text.size())
    return {e.token_begin, std::string(kPrefix) + "string without a closing quote"};
  const auto c = static_cast<unsigned char>(text[e.offending]);
  if (c < 0x20) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "U+%04X", c);
    return {e.offending, std::string(kPrefix) + "control character " + buf +
                             " in a string (missing closing quote? escape it if it belongs)"};
  }
  if (c >= 0x80)
    return {e.offending,
            std::string(kPrefix) + "byte " + byte_hex(c) + " in a string is not UTF-8"};
  // Every remaining way a string fails is at or after a backslash: an unknown escape, a \u
  // without four hex digits, or an unpaired UTF-16 surrogate.
  return {e.offending, std::string(kPrefix) + "invalid escape sequence in a string (JSON has "
                                              "\\\" \\\\ \\/ \\b \\f \\n \\r \\t and \\uXXXX)"};
}

}  // namespace

JsonSyntaxError lex_error(std::string_view text, const JsonTokens& tokens) {
  const JsonLexError& e = *tokens.error;
  const char first = e.token_begin < text.size() ? text[e.token_begin] : '\0';
  if (first == '"') return bad_string(text, e);
  if (first == '-' || (first >= '0' && first <= '9'))
    return {e.token_begin, std::string(kPrefix) + "invalid number (JSON numbers are decimal: "
                                                  "-?digits[.digits][e[+-]digits])"};
  if (first == 't' || first == 'f' || first == 'n')
    return {e.token_begin, std::string(kPrefix) + "invalid literal (JSON's words are true, false "
                                                  "and null; strings need double quotes)"};
  // "0x15": the lexer reads the number 0 and then has no token for 'x'. Point at the number.
  if ((first == 'x' || first == 'X') && !tokens.tokens.empty()) {
    const JsonToken& before = tokens.tokens.back();
    if (before.kind == JsonTokenKind::kNumber && before.end == e.token_begin)
      return {before.begin, std::string(kPrefix) + "JSON has no hexadecimal numbers; write them "
                                                   "as strings, \"0x...\""};
  }
  if (first == '\'')
    return {e.token_begin, std::string(kPrefix) + "unexpected character ''' (JSON strings use "
                                                  "double quotes)"};
  const auto c = static_cast<unsigned char>(first);
  if (c > 0x20 && c < 0x7F)
    return {e.token_begin, std::string(kPrefix) + "unexpected character '" + first + "'"};
  return {e.token_begin, std::string(kPrefix) + "unexpected byte " + byte_hex(c)};
}

JsonSyntaxError unexpected_token(std::string_view text, const JsonTokens& tokens, size_t index,
                                 JsonContainer container) {
  const JsonToken& t = tokens.tokens.at(index);
  const JsonToken* previous = index > 0 ? &tokens.tokens[index - 1] : nullptr;
  // A string is a key when it directly follows '{' or ',' inside an object.
  const bool previous_is_key =
      previous != nullptr && previous->kind == JsonTokenKind::kString &&
      container == JsonContainer::kObject && index >= 2 &&
      (tokens.tokens[index - 2].kind == JsonTokenKind::kBeginObject ||
       tokens.tokens[index - 2].kind == JsonTokenKind::kValueSeparator);
  return {t.begin, std::string(kPrefix) + "unexpected " + describe(text, t) + "; expected " +
                       expected_after(previous, previous_is_key, container)};
}

}  // namespace vmm
