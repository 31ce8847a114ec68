// Where the keys and array elements of a JSON document are, so CPU-profile errors can name a
// line and column.
//
// nlohmann::json keeps no source positions; read_json_document() (json_document.h) records them
// while nlohmann parses. Paths use the spelling the error messages use: "lwp.max_events",
// "cpuid_overrides[0].leaf", "" for the top-level value.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "vmm/cpu/text_position.h"

namespace vmm {

class JsonPositions {
 public:
  // Remembers where the key (its opening quote) or array element at `path` starts. The first
  // record of a path wins (a duplicate key is an error of its own, reported at the duplicate).
  void record(std::string path, TextPosition position);

  // Position of the key or element at `path`. A path that was not recorded falls back to its
  // nearest recorded parent ("lwp.x" -> "lwp" -> ""), then to 1:1.
  TextPosition of(std::string_view path) const;

  // The bytes of all recorded paths (they stay linear in the text: json_document.cc records no
  // path longer than kMaxPositionPath).
  size_t path_bytes() const { return path_bytes_; }

 private:
  std::map<std::string, TextPosition, std::less<>> positions_;
  size_t path_bytes_ = 0;
};

}  // namespace vmm
