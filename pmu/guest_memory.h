// Guest memory as the PMU models see it: by guest *linear* address, through the current address
// space of the vCPU that owns the model. Every access can fail (unmapped page, not writable,
// outside guest RAM); a failure is reported, never a crash. The VMM implements this with a page
// walk of the vCPU's CR3; tests implement it with a flat map.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace pmu {

// Why a user-mode write cannot be done, as the page walk finds it. The first two are what a CPU
// reports as a #PF the guest can resolve (demand paging, copy-on-write); kUnreachable is not: the
// address is not canonical, a paging structure or the page lies outside guest RAM, or the walk
// hit a reserved combination.
enum class WriteFault : uint8_t {
  kNone,
  kNotPresent,   // a paging-structure entry on the way is not present (#PF with P = 0)
  kProtection,   // present, but user mode may not write it: read-only or supervisor (#PF, P = 1)
  kUnreachable,  // not a fault the guest can fix (see above)
};

struct WriteProbe {
  WriteFault fault = WriteFault::kNone;
  uint64_t address = 0;  // the first byte that cannot be written (meaningful when fault != kNone)
};

class GuestMemory {
 public:
  virtual ~GuestMemory() = default;

  // Copies guest bytes [linear, linear + out.size()) into `out`. Returns false (and may leave
  // `out` partly written) when any byte is not readable.
  virtual bool read(uint64_t linear, std::span<std::byte> out) = 0;

  // Writes `in` to guest bytes [linear, linear + in.size()). Returns false when any byte is not
  // writable; then nothing has been written (implementations check before they copy).
  virtual bool write(uint64_t linear, std::span<const std::byte> in) = 0;

  // Whether user mode (CPL 3) could write every byte of [linear, linear + length), and if not,
  // why, for the lowest byte that fails. Touches no guest memory. An empty range is kNone; a
  // range that wraps the address space is kUnreachable.
  virtual WriteProbe probe_user_write(uint64_t linear, uint64_t length) = 0;

  // True when every byte of [linear, linear + length) is mapped, writable by user mode (CPL 3)
  // and inside guest RAM. Touches no guest memory.
  bool user_writable(uint64_t linear, uint64_t length) {
    return probe_user_write(linear, length).fault == WriteFault::kNone;
  }
};

}  // namespace pmu
