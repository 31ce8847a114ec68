// libFuzzer target for the page walker (vmm/memory/page_walker.h): the PMU models and the stepper
// reach guest memory by linear address through the guest's own page tables, which the guest
// writes (DESIGN §4.12). The input fills the first 64 KiB of a 1 MiB guest RAM (page tables,
// self-references, entries pointing past RAM or into each other, huge pages), then names CR3 and
// linear addresses to read, write and probe through PagedGuestMemory, user and supervisor.
// Checked: no crash or sanitizer report; a read or write that succeeds went to RAM (a translation
// may name a page outside it), a user read to a user page, a user write to a user-writable one.
// Seeds (corpus_page_walker/): identity maps with 4 KiB, 2 MiB and 1 GiB pages and a loop.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <variant>

#include "vmm/memory/guest_ram.h"
#include "vmm/memory/page_walker.h"

namespace {

constexpr uint64_t kRam = 1 << 20;
constexpr size_t kTables = 64 * 1024;

uint64_t take_u64(const uint8_t*& at, const uint8_t* end) {
  uint64_t v = 0;
  const size_t n = end - at < 8 ? static_cast<size_t>(end - at) : 8;
  std::memcpy(&v, at, n);
  at += n;
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static vmm::GuestRam ram(kRam);
  std::memset(ram.host(0, kRam), 0, kRam);  // nothing left from an earlier input
  const size_t table_bytes = size < kTables ? size : kTables;
  std::memcpy(ram.host(0, table_bytes), data, table_bytes);
  const uint8_t* at = data + table_bytes;
  const uint8_t* const end = data + size;
  const uint64_t cr3 = take_u64(at, end);
  vmm::PagedGuestMemory user(ram), supervisor(ram, vmm::PagedGuestMemory::Access::kSupervisor);
  user.set_cr3(cr3);
  supervisor.set_cr3(cr3);
  std::byte buffer[64];
  while (end - at >= 9) {
    const uint8_t op = *at++;
    const uint64_t linear = take_u64(at, end);
    const size_t length = 1 + op % sizeof buffer;
    // A translation may name a page outside RAM (the guest may map device memory); an access
    // that succeeds must not have gone there.
    auto walked = vmm::walk(ram, cr3, linear);
    const auto* t = std::get_if<vmm::Translation>(&walked);
    const bool in_ram = t && ram.contains(t->gpa, 1);
    switch ((op >> 6) & 3) {
      case 0:
        if (user.read(linear, {buffer, length}) && (!in_ram || !t->user)) std::abort();
        break;
      case 1:
        if (supervisor.read(linear, {buffer, length}) && !in_ram) std::abort();
        break;
      case 2:
        if (user.write(linear, {buffer, length}) && (!in_ram || !t->user || !t->writable))
          std::abort();  // wrote outside RAM, or where user mode may not
        break;
      default: (void)user.probe_user_write(linear, length); break;
    }
  }
  return 0;
}
