// The page tables the embedded TCG runs under (`--stepper emulate`, user_code_emulator.h): the
// emulator's TLB as x86-64 4-level tables in a buffer Unicorn maps at `kBase`. Unicorn 2.0.1
// walks them for every access it makes with paging on (permissions, a precise #PF with the state
// before the faulting instruction) but then uses the linear address as the physical one: each
// entry's address field means nothing to it, and the guest frame backing a linear page is the
// region mapped at that linear address. A page present here is one the guest's own tables allow
// for what the entry says (writable or not); any other access faults precisely, and the
// emulator decides (user_code_emulator.cc). No Unicorn dependency.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

namespace vmm {

class ShadowPageTables {
 public:
  // Where Unicorn maps the tables: a physical address below the 40 bits of physical address
  // its default CPU has (an entry pointing higher would have reserved bits set), and a linear
  // one no user code of the guest may use in the emulator (user_code_emulator.cc refuses it).
  static constexpr uint64_t kBase = 0xFF'F000'0000;
  // Table pages: a PML4 and what the pages mapped at once need (3 per 2 MiB region at worst).
  static constexpr size_t kPages = 1024;

  ShadowPageTables();

  // The tables' bytes (kPages x 4 KiB, 4 KiB aligned) and the PML4's physical address (CR3).
  std::byte* bytes() { return reinterpret_cast<std::byte*>(pages_.get()); }
  static constexpr size_t size() { return kPages * 4096; }
  static constexpr uint64_t cr3() { return kBase; }

  // Makes the 4 KiB page at `linear` present, writable as given, and executable or not. False
  // when the table pages ran out (reset() and try again) or `linear` is no canonical user
  // address. (Not through XD: Unicorn 2.0.1 keeps EFER.NXE clear whatever is written, so an XD
  // bit would be reserved. The emulator runs at CPL 0 with CR4.SMEP: a user page (U = 1) is
  // data, never fetched; a supervisor page (U = 0) is code.)
  bool set(uint64_t linear, bool writable, bool executable);
  // Makes it not present (its table pages stay).
  void clear(uint64_t linear);
  // Nothing present.
  void reset();

 private:
  uint64_t* table(size_t page) { return pages_.get() + page * 512; }
  struct Free {
    void operator()(uint64_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint64_t[], Free> pages_;  // kPages x 512 entries, page-aligned; 0 the PML4
  size_t used_ = 1;
};

}  // namespace vmm
