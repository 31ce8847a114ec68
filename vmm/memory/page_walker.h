// Guest linear -> guest physical translation by walking the guest's own x86-64 4-level page
// tables in guest RAM (the VMM never caches translations: the guest may change its tables at any
// time). PagedGuestMemory puts this behind pmu::GuestMemory so the PMU models can reach guest
// memory by linear address exactly as the hardware feature would: user-mode permissions, no
// access outside RAM. 5-level paging (CR4.LA57) is not supported by the bundled guest, nor here.
#pragma once

#include <cstdint>
#include <optional>
#include <variant>

#include "pmu/guest_memory.h"
#include "vmm/memory/guest_ram.h"

namespace vmm {

struct Translation {
  uint64_t gpa = 0;
  bool user = false;        // U/S set at every level
  bool writable = false;    // R/W set at every level
  bool executable = false;  // XD (bit 63) clear at every level (set without EFER.NXE: reserved)
  uint64_t page_size = 4096;
  bool accessed = false;  // A set at every level: a CPU's TLB entry for it may still be in use
  bool dirty = false;     // D set in the entry that maps the page
};

// Why a walk found no translation.
enum class WalkFailure : uint8_t {
  kNotCanonical,
  kNotPresent,       // an entry on the way has P = 0 (what a CPU reports as #PF with P = 0)
  kTableOutsideRam,  // a paging structure is not in guest RAM
  kReserved,         // a reserved combination (PS in a PML4E)
};

// Translates `linear` through the tables at `cr3`, or says why it cannot.
std::variant<Translation, WalkFailure> walk(const GuestRam& ram, uint64_t cr3, uint64_t linear);

// The walk a CPU makes when it fills its TLB for an access it allows (the caller checked the
// translation's permissions first): the Accessed flag set in every entry used, and, for a
// write, the Dirty flag in the entry that maps the page, each with one atomic OR (other vCPUs
// may update the same tables; Linux's reclaim clears A and writeback clears D). An emulator
// that maps guest pages for user code marks them so, as hardware would (DESIGN §4.7). nullopt
// where walk() fails (then nothing is marked).
std::optional<Translation> walk_and_mark(GuestRam& ram, uint64_t cr3, uint64_t linear, bool write);

// Translates `linear` through the tables at `cr3`. nullopt when the address is not canonical,
// an entry is not present, a table lies outside RAM, or a reserved combination is found.
std::optional<Translation> translate(const GuestRam& ram, uint64_t cr3, uint64_t linear);

class PagedGuestMemory : public pmu::GuestMemory {
 public:
  // Whose view accesses take: kUser (LWP: only what user mode may read and write) or
  // kSupervisor (the KVM stepper fetching kernel instructions; PEBS writing the kernel's DS
  // area: any present page reads, writable pages write, as with CR0.WP set, which Linux sets).
  enum class Access { kUser, kSupervisor };
  explicit PagedGuestMemory(GuestRam& ram, Access access = Access::kUser)
      : ram_(ram), supervisor_(access == Access::kSupervisor) {}

  // The address space the next accesses use: the owning vCPU's CR3 at the current exit.
  void set_cr3(uint64_t cr3) { cr3_ = cr3; }
  uint64_t cr3() const { return cr3_; }

  bool read(uint64_t linear, std::span<std::byte> out) override;
  // An instruction fetch: like read(), and every page must be executable (a fetch from
  // a readable page with XD set faults).
  bool fetch(uint64_t linear, std::span<std::byte> out);
  bool write(uint64_t linear, std::span<const std::byte> in) override;
  // kNotPresent / kProtection (present but not user-writable) are what a CPU would report as a
  // #PF; a non-canonical address, tables or a page outside RAM and reserved entries are
  // kUnreachable.
  pmu::WriteProbe probe_user_write(uint64_t linear, uint64_t length) override;

 private:
  // Calls fn(gpa, offset, chunk) for each page-sized piece of [linear, linear + length), after
  // checking every piece; returns false (and calls nothing) if any piece fails `ok`.
  template <typename Ok, typename Fn>
  bool for_each_piece(uint64_t linear, uint64_t length, Ok ok, Fn fn);
  // Copies [linear, linear + out.size()) out of RAM when every piece passes `ok` (read, fetch).
  template <typename Ok>
  bool copy_out(uint64_t linear, std::span<std::byte> out, Ok ok);

  GuestRam& ram_;
  bool supervisor_;
  uint64_t cr3_ = 0;
};

}  // namespace vmm
