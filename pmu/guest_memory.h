// Guest memory as the PMU models see it: by guest *linear* address, through the current address
// space of the vCPU that owns the model. Every access can fail (unmapped page, not writable,
// outside guest RAM); a failure is reported, never a crash. The VMM implements this with a page
// walk of the vCPU's CR3; tests implement it with a flat map.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace pmu {

class GuestMemory {
 public:
  virtual ~GuestMemory() = default;

  // Copies guest bytes [linear, linear + out.size()) into `out`. Returns false (and may leave
  // `out` partly written) when any byte is not readable.
  virtual bool read(uint64_t linear, std::span<std::byte> out) = 0;

  // Writes `in` to guest bytes [linear, linear + in.size()). Returns false when any byte is not
  // writable; then nothing has been written (implementations check before they copy).
  virtual bool write(uint64_t linear, std::span<const std::byte> in) = 0;

  // True when every byte of [linear, linear + length) is mapped, writable by user mode (CPL 3)
  // and inside guest RAM. Touches no guest memory.
  virtual bool user_writable(uint64_t linear, uint64_t length) = 0;
};

}  // namespace pmu
