#include "vmm/boot/linux_boot.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "vmm/boot/mp_table.h"
#include "vmm/boot/page_arithmetic.h"
#include "vmm/result.h"

namespace vmm {
namespace {

// Offsets in the zero page / bzImage (Documentation/x86/zero-page.rst and boot.rst).
constexpr size_t kE820Entries = 0x1E8;
constexpr size_t kSetupSects = 0x1F1;
constexpr size_t kVidMode = 0x1FA;
constexpr size_t kBootFlag = 0x1FE;
constexpr size_t kJump = 0x200;  // the byte at 0x201 is the header's length from 0x202
constexpr size_t kHeaderMagic = 0x202;
constexpr size_t kVersion = 0x206;
constexpr size_t kTypeOfLoader = 0x210;
constexpr size_t kLoadFlags = 0x211;
constexpr size_t kRamdiskImage = 0x218;
constexpr size_t kRamdiskSize = 0x21C;
constexpr size_t kHeapEndPtr = 0x224;
constexpr size_t kCmdLinePtr = 0x228;
constexpr size_t kInitrdAddrMax = 0x22C;
constexpr size_t kXloadflags = 0x236;
constexpr size_t kCmdlineSize = 0x238;
constexpr size_t kPrefAddress = 0x258;
constexpr size_t kInitSize = 0x260;
constexpr size_t kHeaderEndMin = 0x264;  // a 2.12+ header reaches at least past init_size
constexpr size_t kE820Table = 0x2D0;
constexpr size_t kE820Max = 128;
constexpr size_t kZeroPageSize = 4096;

constexpr uint8_t kLoadedHigh = 0x01, kCanUseHeap = 0x80;
constexpr uint16_t kXlfKernel64 = 0x01;
constexpr uint32_t kE820Ram = 1, kE820Reserved = 2;
using namespace boot_math;

template <typename T>
T get(std::span<const uint8_t> b, size_t off) {
  T v{};
  std::memcpy(&v, b.data() + off, sizeof v);
  return v;
}
template <typename T>
void put(std::vector<uint8_t>& b, size_t off, T v) {
  std::memcpy(b.data() + off, &v, sizeof v);
}

std::string mib(uint64_t bytes) { return std::to_string((bytes + (1u << 20) - 1) >> 20) + " MiB"; }

struct E820Entry {
  uint64_t addr, size;
  uint32_t type;
};

// RAM below 640 KiB (minus the MP table's KiB), RAM from 1 MiB to the MMIO hole, RAM above
// 4 GiB: the guest's regions (GuestRam), nothing else claimed.
std::vector<E820Entry> e820_map(const GuestRam& ram) {
  std::vector<E820Entry> map;
  map.push_back({0, linux_layout::kMpTable, kE820Ram});
  map.push_back({linux_layout::kMpTable, linux_layout::kBaseMemoryEnd - linux_layout::kMpTable,
                 kE820Reserved});
  map.push_back({0x100000, ram.low_size() - 0x100000, kE820Ram});
  if (ram.high_size()) map.push_back({GuestRam::kHighRamStart, ram.high_size(), kE820Ram});
  return map;
}

}  // namespace

bool has_linux_boot_header(std::span<const uint8_t> file) {
  return file.size() >= kHeaderMagic + 4 && std::memcmp(file.data() + kHeaderMagic, "HdrS", 4) == 0;
}

Result<BzImage> parse_bzimage(std::span<const uint8_t> file, const std::string& name) {
  if (!has_linux_boot_header(file))
    return Error::usage(name + ": not a Linux bzImage (no \"HdrS\" setup header at offset 0x202)");
  if (file.size() < kHeaderEndMin || get<uint16_t>(file, kBootFlag) != 0xAA55)
    return Error::usage(name + ": damaged bzImage (boot flag 0xAA55 missing or file truncated)");
  BzImage image;
  image.protocol = get<uint16_t>(file, kVersion);
  char version[16];
  std::snprintf(version, sizeof version, "%u.%02u", image.protocol >> 8, image.protocol & 0xFF);
  if (image.protocol < 0x020C)
    return Error::usage(
        name + ": boot protocol " + version +
        " is too old; pmuvm needs 2.12 or later (Linux 3.8+) for the 64-bit entry point");
  image.xloadflags = get<uint16_t>(file, kXloadflags);
  if (!(image.xloadflags & kXlfKernel64))
    return Error::usage(
        name +
        ": the kernel has no 64-bit entry point (xloadflags bit 0); a 32-bit kernel "
        "cannot be booted");
  if (!(get<uint8_t>(file, kLoadFlags) & kLoadedHigh))
    return Error::usage(name + ": a zImage (loaded at 0x10000) is not supported; build a bzImage");
  const size_t header_end = kHeaderMagic + get<uint8_t>(file, kJump + 1);
  if (header_end < kHeaderEndMin || header_end > file.size())
    return Error::usage(name + ": damaged bzImage (setup header length " + hex(header_end) + ")");
  const uint8_t sects = get<uint8_t>(file, kSetupSects);
  image.setup_bytes = (uint64_t{sects ? sects : 4u} + 1) * 512;
  if (image.setup_bytes >= file.size())
    return Error::usage(name + ": damaged bzImage (no kernel after " +
                        std::to_string(image.setup_bytes) + " bytes of setup code; the file has " +
                        std::to_string(file.size()) + ")");
  image.load_address = get<uint64_t>(file, kPrefAddress);
  image.init_size = get<uint32_t>(file, kInitSize);
  image.initrd_addr_max = get<uint32_t>(file, kInitrdAddrMax);
  image.cmdline_size = get<uint32_t>(file, kCmdlineSize);
  if (image.load_address < 0x100000 || image.load_address % kPage)
    return Error::usage(name + ": preferred load address " + hex(image.load_address) +
                        " is below 1 MiB or not page aligned");
  return image;
}

Result<LinuxBoot> load_linux(GuestRam& ram, std::span<const uint8_t> kernel_file,
                             const BzImage& image, const std::string& name,
                             const LinuxBootOptions& options) {
  // --- checks, before anything is written --------------------------------------------------
  const uint64_t payload = kernel_file.size() - image.setup_bytes;
  const uint64_t kernel_end = page_up(image.load_address + std::max(payload, image.init_size));
  if (kernel_end > ram.low_size())
    return Error::usage(name + ": the kernel needs RAM up to " + hex(kernel_end) + " (" +
                        mib(kernel_end) + ") while it boots; raise --mem");
  const uint64_t cmdline_max = std::min(image.cmdline_size, linux_layout::kCommandLineMax - 1);
  if (options.cmdline.size() > cmdline_max)
    return Error::usage("--cmdline is " + std::to_string(options.cmdline.size()) + " bytes; " +
                        name + " accepts at most " + std::to_string(cmdline_max));
  LinuxBoot boot;
  boot.entry = image.load_address + 0x200;
  boot.zero_page = linux_layout::kZeroPage;
  if (!options.initrd.empty()) {
    const uint64_t top = std::min<uint64_t>(ram.low_size(), image.initrd_addr_max + 1);
    const uint64_t size = options.initrd.size();
    if (size > top || page_down(top - size) < kernel_end || size > UINT32_MAX)
      return Error::usage(options.initrd_name + ": the initrd (" + mib(size) +
                          ") does not fit in RAM beside " + name + " (needs --mem of at least " +
                          mib(kernel_end + page_up(size) + (1u << 20)) + ")");
    boot.initrd = page_down(top - size);
    boot.initrd_size = size;
  }
  const std::vector<E820Entry> map = e820_map(ram);
  if (map.size() > kE820Max) return Error::vmm("internal error: too many e820 entries");

  // --- the zero page ---------------------------------------------------------------------
  std::vector<uint8_t> zp(kZeroPageSize, 0);
  const size_t header_end = kHeaderMagic + kernel_file[kJump + 1];
  std::memcpy(zp.data() + kSetupSects, kernel_file.data() + kSetupSects, header_end - kSetupSects);
  put<uint16_t>(zp, kVidMode, 0xFFFF);    // "normal"
  put<uint8_t>(zp, kTypeOfLoader, 0xFF);  // undefined boot loader
  put<uint8_t>(zp, kLoadFlags, static_cast<uint8_t>(zp[kLoadFlags] | kCanUseHeap));
  put<uint16_t>(zp, kHeapEndPtr, 0xFE00);
  put<uint32_t>(zp, kCmdLinePtr, static_cast<uint32_t>(linux_layout::kCommandLine));
  put<uint32_t>(zp, kRamdiskImage, static_cast<uint32_t>(boot.initrd));
  put<uint32_t>(zp, kRamdiskSize, static_cast<uint32_t>(boot.initrd_size));
  put<uint8_t>(zp, kE820Entries, static_cast<uint8_t>(map.size()));
  for (size_t i = 0; i < map.size(); ++i) {
    put<uint64_t>(zp, kE820Table + i * 20, map[i].addr);
    put<uint64_t>(zp, kE820Table + i * 20 + 8, map[i].size);
    put<uint32_t>(zp, kE820Table + i * 20 + 16, map[i].type);
  }

  // --- into guest RAM --------------------------------------------------------------------
  auto bytes = [](std::span<const uint8_t> s) { return std::as_bytes(s); };
  bool ok = ram.write(image.load_address, bytes(kernel_file.subspan(image.setup_bytes)));
  ok = ok && ram.write(linux_layout::kZeroPage, bytes(std::span<const uint8_t>(zp)));
  std::vector<uint8_t> cmdline(options.cmdline.begin(), options.cmdline.end());
  cmdline.push_back(0);
  ok = ok && ram.write(linux_layout::kCommandLine, bytes(std::span<const uint8_t>(cmdline)));
  if (boot.initrd_size) ok = ok && ram.write(boot.initrd, bytes(options.initrd));
  ok = ok && write_mp_table(
                 ram, linux_layout::kMpTable, linux_layout::kBaseMemoryEnd - linux_layout::kMpTable,
                 MpTableOptions{options.vcpus, options.cpu_signature, options.cpu_features});
  if (!ok) return Error::vmm("internal error: a Linux boot structure does not fit in guest RAM");
  return boot;
}

}  // namespace vmm
