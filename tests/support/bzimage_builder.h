// A synthetic Linux bzImage: boot sector + 4 setup sectors with a boot-protocol setup header
// (preferred address 16 MiB, init_size 8 MiB, cmdline_size 2047, relocatable, 64-bit entry),
// then `payload` kernel bytes with a recognisable pattern. Enough for every check of
// vmm/boot/linux_boot.h; tests change single fields to reach each refusal.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace pmu::testing {

template <typename T>
void put_le(std::vector<uint8_t>& b, size_t off, T v) {
  std::memcpy(b.data() + off, &v, sizeof v);
}

inline std::vector<uint8_t> make_bzimage(uint16_t protocol = 0x020F, size_t payload = 64 * 1024) {
  std::vector<uint8_t> b(5 * 512 + payload, 0);
  b[0x1F1] = 4;                        // setup_sects
  put_le<uint16_t>(b, 0x1FE, 0xAA55);  // boot_flag
  b[0x200] = 0xEB;                     // jmp
  b[0x201] = 0x6A;                     // header ends at 0x202 + 0x6A = 0x26C
  std::memcpy(b.data() + 0x202, "HdrS", 4);
  put_le<uint16_t>(b, 0x206, protocol);    // version
  b[0x211] = 0x01;                         // loadflags: LOADED_HIGH
  put_le<uint32_t>(b, 0x22C, 0x7FFFFFFF);  // initrd_addr_max
  put_le<uint32_t>(b, 0x230, 0x200000);    // kernel_alignment
  b[0x234] = 1;                            // relocatable
  put_le<uint16_t>(b, 0x236, 0x0003);      // XLF_KERNEL_64 | XLF_CAN_BE_LOADED_ABOVE_4G
  put_le<uint32_t>(b, 0x238, 2047);        // cmdline_size
  put_le<uint64_t>(b, 0x258, 0x1000000);   // pref_address: 16 MiB
  put_le<uint32_t>(b, 0x260, 0x800000);    // init_size: 8 MiB
  for (size_t i = 5 * 512; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 7);
  return b;
}

}  // namespace pmu::testing
