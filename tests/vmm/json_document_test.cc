// The JSON layer under CPU profiles (vmm/cpu/json_document.h): nlohmann's lexer gives token
// extents, nlohmann's SAX parser gives structure, and every key and array element gets the
// line:column where it starts; syntax errors are worded by us and point where a reader looks.
#include "vmm/cpu/json_document.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "vmm/cpu/json_tokens.h"
#include "vmm/cpu/text_position.h"

namespace vmm {
namespace {

using K = JsonTokenKind;

std::string Error(std::string_view text) {
  const JsonDocument doc = read_json_document(text);
  if (!doc.error) return "no error";
  return std::to_string(doc.error->position.line) + ":" +
         std::to_string(doc.error->position.column) + ": " + doc.error->message;
}

TEST(LineIndex, LinesColumnsAndTheEnd) {
  const LineIndex lines("ab\ncd\n");
  EXPECT_EQ(lines.at(0), (TextPosition{1, 1}));
  EXPECT_EQ(lines.at(2), (TextPosition{1, 3}));  // the newline itself ends line 1
  EXPECT_EQ(lines.at(3), (TextPosition{2, 1}));
  EXPECT_EQ(lines.at(6), (TextPosition{3, 1}));   // one past the end
  EXPECT_EQ(lines.at(99), (TextPosition{3, 1}));  // clamped
  EXPECT_EQ(LineIndex("").at(0), (TextPosition{1, 1}));
}

TEST(JsonTokens, KindsAndExtentsFromNlohmannsLexer) {
  // offsets:          0123456789012345678901234567890
  const std::string t = "{\"a\\\"\": [12 ,-1.5e3, true]}";
  const JsonTokens tokens = lex_json(t);
  ASSERT_FALSE(tokens.error);
  const std::vector<std::pair<K, std::pair<size_t, size_t>>> want = {
      {K::kBeginObject, {0, 1}},  {K::kString, {1, 6}},       {K::kNameSeparator, {6, 7}},
      {K::kBeginArray, {8, 9}},   {K::kNumber, {9, 11}},      {K::kValueSeparator, {12, 13}},
      {K::kNumber, {13, 19}},     {K::kValueSeparator, {19, 20}}, {K::kTrue, {21, 25}},
      {K::kEndArray, {25, 26}},   {K::kEndObject, {26, 27}},  {K::kEndOfInput, {27, 28}},
  };
  ASSERT_EQ(tokens.tokens.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(tokens.tokens[i].kind, want[i].first);
    EXPECT_EQ(tokens.tokens[i].begin, want[i].second.first);
    EXPECT_EQ(tokens.tokens[i].end, want[i].second.second);
  }
}

TEST(JsonTokens, ByteOrderMarkAndLexErrors) {
  const JsonTokens bom = lex_json("\xEF\xBB\xBF  null");
  ASSERT_EQ(bom.tokens.size(), 2u);
  EXPECT_EQ(bom.tokens[0].begin, 5u);
  EXPECT_EQ(bom.tokens[0].end, 9u);
  const JsonTokens bad = lex_json("[1, tru]");
  ASSERT_TRUE(bad.error);
  EXPECT_EQ(bad.error->token_begin, 4u);
  EXPECT_EQ(bad.error->offending, 7u);  // the ']' where "true" needed 'e'
  EXPECT_EQ(bad.tokens.size(), 3u);     // '[', 1, ','
  const JsonTokens open = lex_json("\"abc");
  ASSERT_TRUE(open.error);
  EXPECT_EQ(open.error->offending, 4u);  // the end of the text
}

// Builds a JSON text piece by piece and remembers where each key or element was put, so the
// positions read_json_document() records can be checked against an independent account.
class TextBuilder {
 public:
  TextBuilder& raw(std::string_view s) {
    text_ += s;
    return *this;
  }
  TextBuilder& at(std::string path, std::string_view s) {
    want_.emplace_back(std::move(path), text_.size());
    return raw(s);
  }
  const std::string& text() const { return text_; }
  const std::vector<std::pair<std::string, size_t>>& want() const { return want_; }

 private:
  std::string text_;
  std::vector<std::pair<std::string, size_t>> want_;
};

TEST(JsonDocument, RecordsEveryKeyAndElementWhereItStarts) {
  TextBuilder b;
  b.raw("\xEF\xBB\xBF").at("", "{").raw("\n  ").at("n", "\"n\"").raw(": ").raw("-12,\n  ")
      .at("s\"q", "\"s\\\"q\"").raw(":\"v\\u00e9\",")
      .at("list", "\"list\"").raw(": [").at("list[0]", "1e2").raw(",\t").at("list[1]", "{")
      .at("list[1].deep", "\"deep\"").raw(": [").at("list[1].deep[0]", "null").raw(", ")
      .at("list[1].deep[1]", "[").at("list[1].deep[1][0]", "false").raw("]]},\r\n   ")
      .at("list[2]", "\"x\"").raw("],\n")
      .at("u", "\"\\u0075\"").raw(": {}\n}\n");
  const JsonDocument doc = read_json_document(b.text());
  ASSERT_FALSE(doc.error) << doc.error->message;
  EXPECT_EQ(doc.root, nlohmann::json::parse(b.text()));
  const LineIndex lines(b.text());
  for (const auto& [path, offset] : b.want()) {
    SCOPED_TRACE(path);
    EXPECT_EQ(doc.positions.of(path), lines.at(offset));
  }
  // Unrecorded paths fall back to their nearest recorded parent.
  EXPECT_EQ(doc.positions.of("list[1].deep[1][0].x"), doc.positions.of("list[1].deep[1][0]"));
  EXPECT_EQ(doc.positions.of("nothing"), doc.positions.of(""));
}

TEST(JsonDocument, DuplicateKeysAreErrorsAtTheSecondKey) {
  EXPECT_EQ(Error("{\"a\": {\"b\": 1,\n \"b\": 2}}"),
            "2:2: duplicate key a.b (JSON would silently keep only the last one)");
  // Spelt with an escape it is still the same key; the same key in two objects is fine.
  EXPECT_EQ(Error("{\"ab\": 1, \"a\\u0062\": 2}"),
            "1:11: duplicate key ab (JSON would silently keep only the last one)");
  EXPECT_EQ(Error("[{\"a\": 1}, {\"a\": 2}]"), "no error");
  // The first problem in the text is reported: here the duplicate, before the syntax error.
  EXPECT_EQ(Error("{\"a\": 1, \"a\": 2, }"),
            "1:10: duplicate key a (JSON would silently keep only the last one)");
}

TEST(JsonDocument, NestingDepthIsBounded) {
  const std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_EQ(Error(ok), "no error");
  const std::string deep = "[" + ok + "]";
  EXPECT_EQ(Error(deep), "1:257: JSON nests deeper than 256 objects and arrays");
}

// Every kind of syntax error: where it points and what it says.
TEST(JsonDocument, SyntaxErrorsInOurWords) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"a\": 1\n \"b\": 2}",
       "2:2: JSON syntax error: unexpected string \"b\"; expected ',' or '}'"},
      {"{\"a\" 1}", "1:6: JSON syntax error: unexpected number 1; expected ':'"},
      {"{\"a\": 1,}", "1:9: JSON syntax error: unexpected '}'; expected a key string"},
      {"[1,]", "1:4: JSON syntax error: unexpected ']'; expected a value"},
      {"[1 2]", "1:4: JSON syntax error: unexpected number 2; expected ',' or ']'"},
      {"{,}", "1:2: JSON syntax error: unexpected ','; expected a key string or '}'"},
      {"[:]", "1:2: JSON syntax error: unexpected ':'; expected a value or ']'"},
      {"{\"a\": }", "1:7: JSON syntax error: unexpected '}'; expected a value"},
      {"{} []", "1:4: JSON syntax error: unexpected '['; expected end of input (a file holds one "
                "JSON value)"},
      {"", "1:1: JSON syntax error: unexpected end of input; expected a value"},
      {"{\"a\": [1,\n", "2:1: JSON syntax error: unexpected end of input; expected a value"},
      {"{\"a\": \"x}", "1:7: JSON syntax error: string without a closing quote"},
      {"{\"a\": \"x,\n\"b\": 1}", "1:10: JSON syntax error: control character U+000A in a string "
                                "(missing closing quote? escape it if it belongs)"},
      {"[\"a\\qb\"]", "1:5: JSON syntax error: invalid escape sequence in a string (JSON has \\\" "
                      "\\\\ \\/ \\b \\f \\n \\r \\t and \\uXXXX)"},
      {"[\"\\u12G4\"]", "1:7: JSON syntax error: invalid escape sequence in a string (JSON has "
                        "\\\" \\\\ \\/ \\b \\f \\n \\r \\t and \\uXXXX)"},
      {"[\"a\xff\"]", "1:4: JSON syntax error: byte 0xff in a string is not UTF-8"},
      {"[1.x]", "1:2: JSON syntax error: invalid number (JSON numbers are decimal: "
                "-?digits[.digits][e[+-]digits])"},
      {"[-]", "1:2: JSON syntax error: invalid number (JSON numbers are decimal: "
              "-?digits[.digits][e[+-]digits])"},
      {"{\"family\": 0x15}", "1:12: JSON syntax error: JSON has no hexadecimal numbers; write "
                             "them as strings, \"0x...\""},
      {"{\"a\": nul}", "1:7: JSON syntax error: invalid literal (JSON's words are true, false and "
                       "null; strings need double quotes)"},
      {"{'a': 1}", "1:2: JSON syntax error: unexpected character ''' (JSON strings use double "
                   "quotes)"},
      {"[1] # note", "1:5: JSON syntax error: unexpected character '#'"},
      {"[1, \x01]", "1:5: JSON syntax error: unexpected byte 0x01"},
  };
  for (const auto& [text, want] : cases) {
    SCOPED_TRACE(text);
    EXPECT_EQ(Error(text), want);
  }
}

TEST(JsonDocument, LongTokensAreCutInMessages) {
  const std::string key(60, 'k');
  EXPECT_EQ(Error("{\"a\": 1 \"" + key + "\": 2}"),
            "1:9: JSON syntax error: unexpected string \"" + key.substr(0, 36) +
                "...; expected ',' or '}'");
}

}  // namespace
}  // namespace vmm

namespace vmm {
namespace {

// A long key over a long array stored (and copied) the key's path once per element: memory and
// time quadratic in the text (a 1 MiB manifest could ask for hundreds of GiB). Paths longer than
// kMaxPositionPath are not recorded; such values take their nearest recorded parent's position.
TEST(JsonDocument, LongKeysOverLongArraysStayLinear) {
  const std::string key(10'000, 'k');
  std::string text = "{\"short\": 1,\n\"" + key + "\": [";
  for (int i = 0; i < 10'000; ++i) text += i ? ",1" : "1";
  text += "]}";
  const JsonDocument doc = read_json_document(text);
  ASSERT_FALSE(doc.error) << doc.error->message;
  EXPECT_EQ(doc.root[key].size(), 10'000u);
  EXPECT_LT(doc.positions.path_bytes(), 1000u) << "recorded path bytes";
  EXPECT_EQ(doc.positions.of("short"), (TextPosition{1, 2}));
  EXPECT_EQ(doc.positions.of(key + "[9999]"), (TextPosition{1, 1}));  // the document's
}

}  // namespace
}  // namespace vmm
