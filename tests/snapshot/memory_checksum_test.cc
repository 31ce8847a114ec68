// memory.bin's checksum: crc32_of_memory is zlib's CRC-32 of the same bytes, whatever mix of zero
// and non-zero pages, lengths, alignments and starting CRC.
#include "vmm/snapshot/memory_checksum.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "vmm/snapshot/state_sections.h"

namespace vmm {
namespace {

TEST(MemoryChecksum, EqualsZlibsCrcOverEveryMixOfZeroAndDataPages) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    const size_t pages = rng() % 40;
    const size_t tail = rng() % 3 == 0 ? rng() % 4096 : 0;  // lengths that are not whole pages
    std::vector<std::byte> bytes(pages * 4096 + tail);
    for (size_t page = 0; page <= pages; ++page) {
      const size_t begin = page * 4096, end = std::min(bytes.size(), begin + 4096);
      switch (rng() % 4) {
        case 0: case 1: break;  // zero page: runs of them are common
        case 2:  // one set byte anywhere, the last included
          if (begin < end) bytes[begin + rng() % (end - begin)] = std::byte{1};
          break;
        default:
          for (size_t i = begin; i < end; ++i) bytes[i] = static_cast<std::byte>(rng());
      }
    }
    const uint32_t start = round % 2 ? static_cast<uint32_t>(rng()) : 0;
    const size_t offset = rng() % 3 == 0 ? rng() % std::max<size_t>(bytes.size(), 1) : 0;
    const std::span<const std::byte> span = std::span(bytes).subspan(offset);
    ASSERT_EQ(crc32_of_memory(span, start), crc32_of(span, start))
        << "round " << round << ": " << pages << " pages + " << tail << " bytes from " << offset;
  }
}

TEST(MemoryChecksum, LongZeroRunsAndEmpty) {
  std::vector<std::byte> zeros(size_t{64} << 20);  // 16 384 zero pages: combined, not read
  EXPECT_EQ(crc32_of_memory(zeros), crc32_of(zeros));
  zeros[zeros.size() - 1] = std::byte{0x80};
  EXPECT_EQ(crc32_of_memory(zeros, 0x1234), crc32_of(zeros, 0x1234));
  EXPECT_EQ(crc32_of_memory({}), 0u);
}

}  // namespace
}  // namespace vmm
