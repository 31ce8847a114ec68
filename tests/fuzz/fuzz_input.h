// What the fuzz targets that read their input as a program share: the input as a stream of
// little-endian integers (missing bytes read as zero, so every input is a complete program), and
// the check that turns a broken invariant into a crash libFuzzer records.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#define FUZZ_CHECK(cond)           \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

namespace pmuvm_fuzz {

class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  bool empty() const { return n_ == 0; }
  uint8_t u8() {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  uint32_t u32() { return static_cast<uint32_t>(u16()) | (static_cast<uint32_t>(u16()) << 16); }
  uint64_t u64() { return static_cast<uint64_t>(u32()) | (static_cast<uint64_t>(u32()) << 32); }
  std::vector<std::byte> bytes(size_t k) {
    std::vector<std::byte> out(k);
    for (auto& b : out) b = static_cast<std::byte>(u8());
    return out;
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

}  // namespace pmuvm_fuzz
