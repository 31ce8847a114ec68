// Line and column of a byte offset in a text, for "FILE:LINE:COLUMN" messages.
//
// The JSON lexer reports byte offsets; people read lines and columns. LineIndex indexes the line
// starts once, so a profile with hundreds of recorded positions costs one pass, not one per
// position.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace vmm {

struct TextPosition {
  int line = 1;    // 1-based
  int column = 1;  // 1-based, in bytes from the start of the line
  bool operator==(const TextPosition&) const = default;
};

class LineIndex {
 public:
  explicit LineIndex(std::string_view text);

  // The line and column of byte `offset` (0-based); an offset at or past the end is the position
  // just after the last character (where "unexpected end of input" points).
  TextPosition at(size_t offset) const;

 private:
  size_t size_ = 0;
  std::vector<size_t> line_starts_;  // offset of each line's first byte; [0] = 0
};

}  // namespace vmm
