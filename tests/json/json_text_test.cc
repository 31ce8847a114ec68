// JSON from outside the process (vmm/json/json_text.h): nlohmann's SAX parser with our limits,
// syntax errors at the byte nlohmann reports, and keys and elements located by path afterwards.
#include "vmm/json/json_text.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace vmm {
namespace {

constexpr JsonLimits kLimits{.max_bytes = 1 << 20, .max_depth = 8};

// "LINE:COLUMN: message" of the first error in `text`, or "" when it reads.
std::string Error(std::string_view text, const JsonLimits& limits = kLimits) {
  auto r = read_json_text(text, limits);
  return r.ok() ? "" : r.error().message;
}

// Builds a JSON text piece by piece and remembers where each key or element was put, so the
// offsets locate_json_path() finds can be checked against an independent account.
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

TEST(JsonText, LocatesEveryKeyAndElementWhereItStarts) {
  TextBuilder b;
  b.raw("\xEF\xBB\xBF")
      .at("", "{")
      .raw("\n  ")
      .at("n", "\"n\"")
      .raw(": ")
      .raw("-12,\n  ")
      .at("s\"q", "\"s\\\"q\"")
      .raw(":\"v\\u00e9\",")
      .at("bs\\", "\"bs\\\\\"")
      .raw(":\"x\\\\\",")
      .at("list", "\"list\"")
      .raw(": [")
      .at("list[0]", "1e2")
      .raw(",\t")
      .at("list[1]", "{")
      .at("list[1].deep", "\"deep\"")
      .raw(": [")
      .at("list[1].deep[0]", "null")
      .raw(", ")
      .at("list[1].deep[1]", "[")
      .at("list[1].deep[1][0]", "false")
      .raw(",")
      .at("list[1].deep[1][1]", "true")
      .raw(",")
      .at("list[1].deep[1][2]", "\"a\\\"\"")
      .raw(",")
      .at("list[1].deep[1][3]", "-0.5E+3")
      .raw("]]},\r\n   ")
      .at("list[2]", "\"x\"")
      .raw(",")
      .at("list[3]", "7")
      .raw("],\n")
      .at("u", "\"\\u0075\"")
      .raw(": {}\n}\n");
  auto read = read_json_text(b.text(), kLimits);
  ASSERT_TRUE(read.ok()) << Error(b.text());
  EXPECT_EQ(read.value(), nlohmann::json::parse(b.text()));
  for (const auto& [path, offset] : b.want()) {
    SCOPED_TRACE(path);
    EXPECT_EQ(locate_json_path(b.text(), path), offset);
  }
  // A path the text does not have falls back to its nearest enclosing one.
  EXPECT_EQ(locate_json_path(b.text(), "list[1].deep[1][0].x"),
            locate_json_path(b.text(), "list[1].deep[1][0]"));
  EXPECT_EQ(locate_json_path(b.text(), "list[9]"), locate_json_path(b.text(), "list"));
  EXPECT_EQ(locate_json_path(b.text(), "nothing"), 3u);  // the top-level value, after the BOM
}

TEST(JsonText, LineColumnCountsBytesFromOne) {
  EXPECT_EQ(line_column("ab\ncd", 0), "1:1");
  EXPECT_EQ(line_column("ab\ncd", 2), "1:3");
  EXPECT_EQ(line_column("ab\ncd", 3), "2:1");
  EXPECT_EQ(line_column("ab\ncd", 99), "2:3");  // past the end: after the last byte
}

TEST(JsonText, FirstKeyIsInTextOrderNotSortedOrder) {
  const std::string text = "{\"o\": {\"z\": 1, \"b\": 2, \"a\": {\"y\": 3}}, \"y\": 0}";
  auto not_b = [](const std::string& k) { return k != "b"; };
  EXPECT_EQ(first_json_key(text, "o", not_b), "z");
  EXPECT_EQ(first_json_key(text, "o.a", not_b), "y");
  EXPECT_EQ(first_json_key(text, "", [](const std::string& k) { return k == "y"; }), "y");
  EXPECT_EQ(first_json_key(text, "o", [](const std::string& k) { return k == "q"; }), std::nullopt);
}

TEST(JsonText, DuplicateKeysAreErrorsAtTheSecondKey) {
  EXPECT_EQ(Error("{\"a\": {\"b\": 1,\n \"b\": 2}}"),
            "2:2: duplicate key a.b (JSON would silently keep only the last one)");
  EXPECT_EQ(Error("{\"a\\u0062\": 1, \"ab\": 2}"),
            "1:16: duplicate key ab (JSON would silently keep only the last one)");
  EXPECT_EQ(Error("[{\"a\": 1}, {\"a\": 1, \"a\": 2}]"),
            "1:21: duplicate key [1].a (JSON would silently keep only the last one)");
  JsonLimits lenient = kLimits;
  lenient.duplicate_keys_allowed = true;
  EXPECT_EQ(Error("{\"a\": 1, \"a\": 2}", lenient), "");
}

TEST(JsonText, DepthAndSizeAreBounded) {
  EXPECT_EQ(Error(std::string(8, '[') + std::string(8, ']')), "");
  EXPECT_EQ(Error("[[{\"a\": [[[[[[]]]]]]}]]"),
            "1:14: JSON nests deeper than 8 objects and arrays");
  // Refused as it is read: a text far deeper than any stack costs nothing more.
  EXPECT_EQ(Error(std::string(1'000'000, '[')), "1:9: JSON nests deeper than 8 objects and arrays");
  EXPECT_EQ(Error("[1, 2]", {.max_bytes = 5, .max_depth = 8}),
            "1:6: the JSON text is 6 bytes, over the limit of 5");
}

// The reason is nlohmann's; the position, the byte where its parser stopped (the last it read).
TEST(JsonText, SyntaxErrorsPointWhereTheParserStopped) {
  const std::pair<std::string, std::string> cases[] = {
      {"",
       "1:1: JSON syntax error while parsing value - unexpected end of input; expected '[', "
       "'{', or a literal"},
      {"{\"a\": 1,}",
       "1:9: JSON syntax error while parsing object key - unexpected '}'; "
       "expected string literal"},
      {"[1,\n 2 3]",
       "2:4: JSON syntax error while parsing array - unexpected number literal; "
       "expected ']'"},
      {"{\"a\": \"x}",
       "1:10: JSON syntax error while parsing value - invalid string: missing "
       "closing quote; last read: '\"x}'"},
      {"{} []",
       "1:4: JSON syntax error while parsing value - unexpected '['; expected end of "
       "input"},
      {"[1e99999]", "1:8: JSON number overflow parsing '1e99999'"},
  };
  for (const auto& [text, want] : cases) {
    SCOPED_TRACE(text);
    EXPECT_EQ(Error(text), want);
  }
}

}  // namespace
}  // namespace vmm
