// The CRC-32 of guest memory for a snapshot's memory.bin: exactly zlib's crc32 of the same bytes
// (crc32_of), computed faster where pages are all zero. Guest RAM is mostly zero pages (never
// touched, or freed), and zlib's byte-table CRC is the slowest part of writing or restoring a
// snapshot (issue 21: 400 MiB/s in the nested KVM host, below `cat`): a run of zero pages is
// folded in with crc32_combine from precomputed CRCs of zero blocks instead of being read byte
// by byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace vmm {

// crc32_of(bytes, crc), whatever the bytes' length and alignment.
uint32_t crc32_of_memory(std::span<const std::byte> bytes, uint32_t crc = 0);

}  // namespace vmm
