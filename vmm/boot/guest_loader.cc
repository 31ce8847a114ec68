#include "vmm/boot/guest_loader.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "guest/abi/pmuvm_abi.h"
#include "vmm/boot/guest_layout.h"
#include "vmm/boot/page_arithmetic.h"
#include "vmm/result.h"

namespace vmm {
namespace {

using namespace boot_math;

constexpr uint64_t kUserSpaceEnd = 0x800000000000;  // 4-level paging's lower canonical half

// Physical bytes a program needs: each segment's pages, plus its argument strings.
uint64_t program_footprint(const GuestProgram& p) {
  uint64_t bytes = 0;
  for (const ElfSegment& s : p.image.segments)
    bytes += page_up(s.vaddr + s.memsz) - page_down(s.vaddr);
  uint64_t args = p.path.size() + 1;
  for (const std::string& a : p.args) args += a.size() + 1;
  return bytes + page_up(args);
}

uint64_t kernel_end(const ElfImage& kernel) {
  uint64_t end = 0;
  for (const ElfSegment& s : kernel.segments) end = std::max(end, s.paddr + s.memsz);
  return page_up(end);
}

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

uint64_t minimum_ram_mib(const ElfImage& kernel, const std::vector<GuestProgram>& programs) {
  uint64_t bytes = kernel_end(kernel);
  for (const GuestProgram& p : programs) bytes += program_footprint(p);
  bytes += 2ull << 20;  // headroom for the kernel's page tables, stacks and heap
  return (bytes + (1ull << 20) - 1) >> 20;
}

Result<LoadedGuest> load_guest(GuestRam& ram, const ElfImage& kernel,
                               const std::string& kernel_name,
                               const std::vector<GuestProgram>& programs,
                               const BootParameters& params) {
  // --- checks, before anything is written --------------------------------------------------
  for (const ElfSegment& s : kernel.segments) {
    if (s.paddr < layout::kKernelMin)
      return Error::usage(kernel_name + ": segment at physical " + hex(s.paddr) +
                          " is below 1 MiB");
    // The kernel lies in RAM below the MMIO hole; checked as a range (paddr + memsz may wrap).
    if (s.paddr > ram.low_size() || s.memsz > ram.low_size() - s.paddr)
      return Error::usage(kernel_name + ": segment at physical " + hex(s.paddr) + " (" +
                          hex(s.memsz) + " bytes) is not inside guest RAM (" +
                          hex(layout::kKernelMin) + "-" + hex(ram.low_size()) + ")");
  }
  if (programs.size() > PMUVM_MAX_PROGRAMS)
    return Error::usage("too many programs: " + std::to_string(programs.size()) + " (at most " +
                        std::to_string(PMUVM_MAX_PROGRAMS) + ")");
  uint64_t kernel_low = UINT64_MAX, kernel_high = 0;
  for (const ElfSegment& s : kernel.segments) {
    kernel_low = std::min(kernel_low, s.vaddr);
    kernel_high = std::max(kernel_high, s.vaddr + s.memsz);
  }
  for (const GuestProgram& p : programs) {
    if (p.image.segments.size() > PMUVM_MAX_SEGMENTS)
      return Error::usage(p.path + ": " + std::to_string(p.image.segments.size()) +
                          " loadable segments (at most " + std::to_string(PMUVM_MAX_SEGMENTS) +
                          ")");
    for (const ElfSegment& s : p.image.segments) {
      // User space is the lower canonical half: page rounding of the end cannot wrap there.
      if (s.vaddr + s.memsz > kUserSpaceEnd)
        return Error::usage(p.path + ": segment " + hex(s.vaddr) + "-" + hex(s.vaddr + s.memsz) +
                            " is not in user space (below " + hex(kUserSpaceEnd) + ")");
      if (s.vaddr < kernel_high && kernel_low < s.vaddr + s.memsz)
        return Error::usage(p.path + ": segment " + hex(s.vaddr) + "-" + hex(s.vaddr + s.memsz) +
                            " overlaps the kernel (" + hex(kernel_low) + "-" + hex(kernel_high) +
                            ")");
    }
  }
  const uint64_t needed_mib = minimum_ram_mib(kernel, programs);
  if (ram.size() < (needed_mib << 20))
    return Error::usage("--mem " + std::to_string(ram.size() >> 20) + " MiB is too small for " +
                        kernel_name + " and " + std::to_string(programs.size()) +
                        " program(s): need at least " + std::to_string(needed_mib) + " MiB");

  // Every write is checked (the checks above should make them fit; a write that did not would
  // otherwise leave the guest a silently incomplete image).
  bool written = true;
  auto put = [&](uint64_t gpa, std::span<const std::byte> bytes) {
    written = ram.write(gpa, bytes) && written;
  };

  // --- kernel ------------------------------------------------------------------------------
  for (const ElfSegment& s : kernel.segments) {
    std::vector<std::byte> zero(s.memsz - s.filesz);
    put(s.paddr, kernel.contents(s));
    put(s.paddr + s.filesz, zero);
  }

  // --- programs and boot information -------------------------------------------------------
  pmuvm_boot_info info{};
  info.magic = PMUVM_BOOT_MAGIC;
  info.version = PMUVM_BOOT_VERSION;
  info.vcpu_count = params.vcpu_count;
  info.ram_size = ram.low_size();  // the bundled kernel uses RAM below the MMIO hole only
  info.program_count = static_cast<uint32_t>(programs.size());
  info.pv_features = params.pv_features;
  info.timer_hz = params.timer_hz;
  uint64_t next = kernel_end(kernel);
  for (size_t i = 0; i < programs.size(); ++i) {
    const GuestProgram& p = programs[i];
    pmuvm_program& out = info.programs[i];
    std::strncpy(out.name, base_name(p.path).c_str(), PMUVM_MAX_NAME - 1);
    out.entry = p.image.entry;
    out.segment_count = static_cast<uint32_t>(p.image.segments.size());
    for (size_t k = 0; k < p.image.segments.size(); ++k) {
      const ElfSegment& s = p.image.segments[k];
      const uint64_t first_page = page_down(s.vaddr);
      const uint64_t span = page_up(s.vaddr + s.memsz) - first_page;
      std::vector<std::byte> zero(span);
      put(next, zero);
      put(next + (s.vaddr - first_page), p.image.contents(s));
      out.segments[k] =
          pmuvm_segment{s.vaddr, next + (s.vaddr - first_page), s.memsz,
                        (s.executable ? PMUVM_SEG_X : 0u) | (s.writable ? PMUVM_SEG_W : 0u) |
                            (s.readable ? PMUVM_SEG_R : 0u),
                        0};
      next += span;
    }
    std::string args = base_name(p.path) + '\0';
    for (const std::string& a : p.args) args += a + '\0';
    out.argc = static_cast<uint32_t>(1 + p.args.size());
    out.args_paddr = next;
    out.args_size = args.size();
    put(next, std::as_bytes(std::span(args.data(), args.size())));
    next += page_up(args.size());
  }
  info.free_phys_start = next;
  put(PMUVM_BOOT_INFO_ADDR, std::as_bytes(std::span(&info, 1)));
  if (!written)
    return Error::usage(kernel_name + " and " + std::to_string(programs.size()) +
                        " program(s) do not fit in guest RAM below the MMIO hole");
  return LoadedGuest{kernel.entry, PMUVM_BOOT_INFO_ADDR, next};
}

}  // namespace vmm
