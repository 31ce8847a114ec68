// libFuzzer target for the guest images pmuvm loads (DESIGN §4.12: kernel images are untrusted):
// byte 0 picks the kind, the rest is the file. Even: an ELF (parse_elf), loaded as the bundled
// kernel's stand-in with load_guest; odd: a bzImage (parse_bzimage), loaded with load_linux and an
// initrd. Into 64 MiB of guest RAM: an image that does not fit must be refused with a reason and
// nothing written outside RAM (GuestRam checks each write; past its mapping is unmapped memory).
// Seeds (corpus_guest_image/): small ELFs and bzImages from tests/support's builders.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "vmm/boot/guest_loader.h"
#include "vmm/boot/linux_boot.h"
#include "vmm/boot/elf_image.h"
#include "vmm/memory/guest_ram.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  vmm::GuestRam ram(64ull << 20);
  if ((data[0] & 1) == 0) {
    std::vector<std::byte> bytes(size - 1);
    for (size_t i = 1; i < size; ++i) bytes[i - 1] = static_cast<std::byte>(data[i]);
    auto parsed = vmm::parse_elf(std::move(bytes), "fuzz.elf");
    const auto* elf = parsed.ok() ? &parsed.value() : nullptr;
    if (!elf) return 0;
    (void)vmm::load_guest(ram, *elf, "fuzz.elf", {}, vmm::BootParameters{});
  } else {
    const std::span<const uint8_t> file(data + 1, size - 1);
    if (!vmm::has_linux_boot_header(file)) return 0;
    auto parsed = vmm::parse_bzimage(file, "fuzz.bzImage");
    const auto* image = parsed.ok() ? &parsed.value() : nullptr;
    if (!image) return 0;
    static const uint8_t initrd[4096] = {0x30, 0x37, 0x30, 0x37};
    vmm::LinuxBootOptions options;
    options.cmdline = "console=ttyS0";
    options.initrd = initrd;
    options.initrd_name = "initrd";
    (void)vmm::load_linux(ram, file, *image, "fuzz.bzImage", options);
  }
  return 0;
}
