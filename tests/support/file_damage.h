// Damages files on purpose (snapshot tests): one byte flipped in place.
#pragma once

#include <fstream>
#include <string>

namespace pmuvm_test {

// XORs the byte at `offset` of `path` with `mask` (the file keeps its size).
inline void flip_byte(const std::string& path, long offset, char mask = 0x40) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.get(c);
  f.seekp(offset);
  f.put(static_cast<char>(c ^ mask));
}

}  // namespace pmuvm_test
