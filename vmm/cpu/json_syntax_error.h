// Our own wording for the first JSON syntax error in a profile, and where to point at it.
//
// nlohmann's messages are English sentences that change between releases and talk about its
// parser's states ("while parsing object key"); matching them was fragile. The facts they rest on
// are structured, though: which token the lexer could not read (and which byte stopped it), or
// which well-formed token the parser did not expect after which other token. From those facts we
// say what went wrong in terms of the text the user wrote, and what would have been accepted.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "vmm/cpu/json_tokens.h"

namespace vmm {

struct JsonSyntaxError {
  size_t offset = 0;    // byte to point at
  std::string message;  // "JSON syntax error: ..."
};

// A token the lexer could not read (`tokens.error` must be set): a bad string, number or literal,
// or a character JSON has no token for.
JsonSyntaxError lex_error(std::string_view text, const JsonTokens& tokens);

// What encloses the unexpected token: nothing (top level), an object or an array.
enum class JsonContainer { kNone, kObject, kArray };

// The parser rejected `tokens.tokens[index]`, a well-formed token in the wrong place, inside
// `container`.
JsonSyntaxError unexpected_token(std::string_view text, const JsonTokens& tokens, size_t index,
                                 JsonContainer container);

}  // namespace vmm
