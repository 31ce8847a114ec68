#include "vmm/cpu/json_positions.h"

#include <algorithm>
#include <cstdint>
#include <set>

namespace vmm {

TextPosition position_of_offset(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  TextPosition pos;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++pos.line;
      pos.column = 1;
    } else {
      ++pos.column;
    }
  }
  return pos;
}

// A recursive walk over already-validated JSON. Every step checks bounds, so malformed input
// ends the walk early instead of misbehaving.
class JsonScanner {
 public:
  JsonScanner(std::string_view text, JsonPositions& out) : text_(text), out_(out) {}

  void run() {
    if (text_.starts_with("\xEF\xBB\xBF")) i_ = 3;  // nlohmann skips a UTF-8 byte-order mark too
    skip_ws();
    record("", i_);
    value("", 0);
  }

 private:
  static constexpr int kMaxDepth = 256;  // nlohmann nests deeper, but no profile does

  bool at_end() const { return i_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[i_]; }

  void skip_ws() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) ++i_;
  }

  void record(const std::string& path, size_t offset) {
    out_.positions_.emplace(path, position_of_offset(text_, offset));
  }

  void value(const std::string& path, int depth) {
    if (depth > kMaxDepth || at_end()) return;
    switch (peek()) {
      case '{': object(path, depth); break;
      case '[': array(path, depth); break;
      case '"': string(); break;
      default:  // number, true, false, null: skip to the next structural character
        while (!at_end() && std::string_view(",}] \t\r\n").find(peek()) == std::string_view::npos)
          ++i_;
    }
  }

  void object(const std::string& path, int depth) {
    ++i_;  // '{'
    std::set<std::string> seen;
    for (;;) {
      skip_ws();
      if (at_end() || peek() == '}') break;
      if (peek() != '"') return;  // not JSON: stop
      const size_t key_offset = i_;
      const std::string key = string();
      const std::string child = path.empty() ? key : path + "." + key;
      if (!seen.insert(key).second) {
        if (!out_.duplicate_) out_.duplicate_ = {child, position_of_offset(text_, key_offset)};
      } else {
        record(child, key_offset);
      }
      skip_ws();
      if (peek() != ':') return;
      ++i_;
      skip_ws();
      value(child, depth + 1);
      skip_ws();
      if (peek() == ',') ++i_;
    }
    if (!at_end()) ++i_;  // '}'
  }

  void array(const std::string& path, int depth) {
    ++i_;  // '['
    for (size_t index = 0;; ++index) {
      skip_ws();
      if (at_end() || peek() == ']') break;
      const std::string child = path + "[" + std::to_string(index) + "]";
      record(child, i_);
      const size_t before = i_;
      value(child, depth + 1);
      if (i_ == before) return;  // no progress: not JSON
      skip_ws();
      if (peek() == ',') ++i_;
    }
    if (!at_end()) ++i_;  // ']'
  }

  // Reads a string literal starting at '"' and returns it decoded (the same key nlohmann stores).
  std::string string() {
    std::string s;
    ++i_;  // opening quote
    while (!at_end() && peek() != '"') {
      char c = text_[i_++];
      if (c != '\\') {
        s += c;
        continue;
      }
      if (at_end()) break;
      c = text_[i_++];
      switch (c) {
        case 'b': s += '\b'; break;
        case 'f': s += '\f'; break;
        case 'n': s += '\n'; break;
        case 'r': s += '\r'; break;
        case 't': s += '\t'; break;
        case 'u': append_utf8(s, unicode_escape()); break;
        default: s += c;  // '"', '\\', '/'
      }
    }
    if (!at_end()) ++i_;  // closing quote
    return s;
  }

  // After "\u": four hex digits, combined with a following low surrogate when there is one.
  uint32_t unicode_escape() {
    uint32_t cp = hex4();
    if (cp >= 0xD800 && cp <= 0xDBFF && i_ + 1 < text_.size() && text_[i_] == '\\' &&
        text_[i_ + 1] == 'u') {
      i_ += 2;
      const uint32_t low = hex4();
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    return cp;
  }

  uint32_t hex4() {
    uint32_t v = 0;
    for (int k = 0; k < 4 && !at_end(); ++k) {
      const char c = text_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
    }
    return v;
  }

  static void append_utf8(std::string& s, uint32_t cp) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string_view text_;
  JsonPositions& out_;
  size_t i_ = 0;
};

JsonPositions JsonPositions::scan(std::string_view text) {
  JsonPositions positions;
  JsonScanner(text, positions).run();
  return positions;
}

TextPosition JsonPositions::of(std::string_view path) const {
  std::string p(path);
  for (;;) {
    if (auto it = positions_.find(p); it != positions_.end()) return it->second;
    if (p.empty()) return TextPosition{};
    // Drop the last component: ".key" or "[n]".
    const size_t cut = p.find_last_of(".[");
    p.resize(cut == std::string::npos ? 0 : cut);
  }
}

}  // namespace vmm
