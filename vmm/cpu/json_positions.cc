#include "vmm/cpu/json_positions.h"

#include <utility>

namespace vmm {

void JsonPositions::record(std::string path, TextPosition position) {
  const size_t size = path.size();
  if (positions_.emplace(std::move(path), position).second) path_bytes_ += size;
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
