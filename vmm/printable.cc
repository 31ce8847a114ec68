#include "vmm/printable.h"

#include <cstdint>

namespace vmm {
namespace {

// The length of the well-formed UTF-8 sequence at `s` (a multi-byte one), or 0.
size_t utf8_sequence(std::string_view s) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t lead = b(0);
  size_t n = 0;
  uint32_t min = 0;
  if (lead >= 0xC2 && lead <= 0xDF)
    n = 2, min = 0x80;
  else if (lead >= 0xE0 && lead <= 0xEF)
    n = 3, min = 0x800;
  else if (lead >= 0xF0 && lead <= 0xF4)
    n = 4, min = 0x10000;
  else
    return 0;
  if (s.size() < n) return 0;
  uint32_t code = lead & (0x7F >> n);
  for (size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xC0) != 0x80) return 0;
    code = code << 6 | (b(i) & 0x3F);
  }
  // No overlong forms, no surrogates, nothing past U+10FFFF.
  if (code < min || (code >= 0xD800 && code <= 0xDFFF) || code > 0x10FFFF) return 0;
  return n;
}

// Appends the first options.max_bytes of `text`, escaped; returns how many bytes were left out.
size_t escape_into(std::string& out, std::string_view text, const PrintableOptions& options,
                   bool in_quotes) {
  static const char kHex[] = "0123456789abcdef";
  const std::string_view shown = text.substr(0, options.max_bytes);
  for (size_t i = 0; i < shown.size();) {
    const uint8_t c = static_cast<uint8_t>(shown[i]);
    if (c >= 0x80) {
      if (const size_t n = utf8_sequence(shown.substr(i))) {
        out.append(shown.substr(i, n));
        i += n;
        continue;
      }
    }
    ++i;
    switch (c) {
      case '\n': out += options.keep_newlines ? "\n" : "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\\': out += "\\\\"; continue;
      case '"': out += in_quotes ? "\\\"" : "\""; continue;
      default: break;
    }
    if (c < 0x20 || c >= 0x7F) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    } else {
      out += static_cast<char>(c);
    }
  }
  return text.size() - shown.size();
}

std::string more(size_t left_out) {
  return left_out ? "... (" + std::to_string(left_out) + " more bytes)" : "";
}

}  // namespace

std::string printable(std::string_view text, PrintableOptions options) {
  std::string out;
  const size_t left_out = escape_into(out, text, options, false);
  return out + more(left_out);
}

std::string in_quotes(std::string_view text, PrintableOptions options) {
  std::string out = "\"";
  const size_t left_out = escape_into(out, text, options, true);
  return out + "\"" + more(left_out);
}

}  // namespace vmm
