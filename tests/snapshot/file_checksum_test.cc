// The XXH64 of a snapshot's files: xxHash's reference values, streaming equal to one call
// however the bytes are split, and the manifest's 16-hex-digit text both ways.
#include "vmm/snapshot/file_checksum.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace vmm {
namespace {

std::span<const std::byte> bytes_of(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

TEST(FileChecksum, ReferenceValues) {
  // xxHash's own test vectors for XXH64 with seed 0 (xxhsum -H1).
  EXPECT_EQ(FileChecksum::of({}), 0xef46db3751d8e999ull);
  EXPECT_EQ(FileChecksum::of(bytes_of("abc")), 0x44bc2cf5ad770999ull);
}

TEST(FileChecksum, StreamingEqualsOneCallHoweverSplit) {
  std::mt19937_64 rng(3);
  std::vector<std::byte> data(1 << 20);
  for (std::byte& b : data) b = static_cast<std::byte>(rng());
  const uint64_t whole = FileChecksum::of(data);
  for (int round = 0; round < 20; ++round) {
    FileChecksum c;
    for (size_t at = 0; at < data.size();) {
      const size_t n = std::min<size_t>(data.size() - at, rng() % 70000);
      c.update(std::span(data).subspan(at, n));
      at += n;
    }
    EXPECT_EQ(c.digest(), whole) << round;
  }
}

TEST(FileChecksum, TextIsSixteenHexDigits) {
  EXPECT_EQ(checksum_text(0xef46db3751d8e999ull), "ef46db3751d8e999");
  EXPECT_EQ(checksum_text(1), "0000000000000001");
  EXPECT_EQ(parse_checksum_text("ef46db3751d8e999"), 0xef46db3751d8e999ull);
  for (const char* bad : {"", "ef46db3751d8e99", "ef46db3751d8e9999", "EF46DB3751D8E999",
                          "ef46db3751d8e99g", "0x46db3751d8e999"})
    EXPECT_EQ(parse_checksum_text(bad), std::nullopt) << bad;
}

}  // namespace
}  // namespace vmm
