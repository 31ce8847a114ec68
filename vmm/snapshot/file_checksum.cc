#include "vmm/snapshot/file_checksum.h"

#include <xxhash.h>

#include <cstdio>
#include <new>

namespace vmm {

FileChecksum::FileChecksum() : state_(XXH64_createState()) {
  if (!state_) throw std::bad_alloc();
  XXH64_reset(state_, 0);
}

FileChecksum::~FileChecksum() { XXH64_freeState(state_); }

void FileChecksum::update(std::span<const std::byte> bytes) {
  XXH64_update(state_, bytes.data(), bytes.size());
}

uint64_t FileChecksum::digest() const { return XXH64_digest(state_); }

uint64_t FileChecksum::of(std::span<const std::byte> bytes) {
  return XXH64(bytes.data(), bytes.size(), 0);
}

std::string checksum_text(uint64_t checksum) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(checksum));
  return text;
}

std::optional<uint64_t> parse_checksum_text(const std::string& text) {
  if (text.size() != 16) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return std::nullopt;
    value = value << 4 | static_cast<uint64_t>(digit);
  }
  return value;
}

}  // namespace vmm
