#include "vmm/cpu/text_position.h"

#include <algorithm>

namespace vmm {

LineIndex::LineIndex(std::string_view text) : size_(text.size()), line_starts_{0} {
  for (size_t i = 0; i < text.size(); ++i)
    if (text[i] == '\n') line_starts_.push_back(i + 1);
}

TextPosition LineIndex::at(size_t offset) const {
  offset = std::min(offset, size_);
  // The last line start at or before `offset`.
  const auto line = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset) - 1;
  return TextPosition{static_cast<int>(line - line_starts_.begin()) + 1,
                      static_cast<int>(offset - *line) + 1};
}

}  // namespace vmm
