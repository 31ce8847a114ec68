// Where things are in a JSON text, so CPU-profile errors can name a line and column.
//
// nlohmann::json parses the profile but keeps no source positions, so after it has accepted the
// text this scanner walks the same text once and records, for every object key and every array
// element, the 1-based line and column where it starts. Paths use the spelling the error messages
// use: "lwp.max_events", "cpuid_overrides[0].leaf", "" for the top-level value. The scanner also
// reports duplicate keys, which nlohmann accepts silently (the last one wins) and which a
// hand-edited profile almost always has by mistake.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vmm {

struct TextPosition {
  int line = 1;    // 1-based
  int column = 1;  // 1-based, in bytes from the start of the line
  bool operator==(const TextPosition&) const = default;
};

// The line and column of byte `offset` (0-based) of `text`; an offset at or past the end is the
// position just after the last character.
TextPosition position_of_offset(std::string_view text, size_t offset);

class JsonPositions {
 public:
  // `text` must be JSON that nlohmann::json::parse accepted; on anything else the result is
  // partial (positions seen before the scanner got lost) but scanning never reads out of bounds.
  static JsonPositions scan(std::string_view text);

  // Position of the key (its opening quote) or array element at `path`. A path that was not
  // recorded falls back to its nearest recorded parent ("lwp.x" -> "lwp" -> ""), then to 1:1.
  TextPosition of(std::string_view path) const;

  struct Duplicate {
    std::string path;        // path of the second occurrence
    TextPosition position;   // its key's position
  };
  // The first key (in text order) that repeats a key of the same object.
  const std::optional<Duplicate>& first_duplicate() const { return duplicate_; }

 private:
  friend class JsonScanner;
  std::map<std::string, TextPosition, std::less<>> positions_;
  std::optional<Duplicate> duplicate_;
};

}  // namespace vmm
