// Where the KVM stepper looks for the kernel's returns to user mode
// (vmm/precise/kernel_entry_points.h): IA32_LSTAR and every IDT gate are guest values, and the
// search after them must stay within the address space whatever they are (issue 38, item 1: a
// gate near 2^64 wrapped the search's page loop past 2^64; it read below a stack array, then ran
// on).
#include "vmm/precise/kernel_entry_points.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <vector>

#include "pmu/state_archive.h"
#include "tests/support/fake_guest_memory.h"

namespace vmm {
namespace {

constexpr uint64_t kIdt = 0xffffffff82000000ull;

// An IDT whose gates all point at `target` (present interrupt gates, DPL 0).
void idt_to(pmu::testing::FakeGuestMemory& mem, uint64_t target) {
  mem.map(kIdt, 256 * 16);
  for (int v = 0; v < 256; ++v) {
    std::array<uint8_t, 16> gate{};
    gate[0] = target & 0xFF, gate[1] = (target >> 8) & 0xFF, gate[2] = 0x10;
    gate[5] = 0x8E;
    gate[6] = (target >> 16) & 0xFF, gate[7] = (target >> 24) & 0xFF;
    const uint32_t high = static_cast<uint32_t>(target >> 32);
    std::memcpy(&gate[8], &high, 4);
    mem.write(kIdt + 16 * v, std::as_bytes(std::span(gate)));
  }
}

TEST(KernelEntryPoints, GatesAtTheTopOfTheAddressSpaceAreSearchedWithoutWrapping) {
  for (const uint64_t target :
       {~0ull - 0x2FFE, ~0ull - 0x2800, ~0ull - 0x2000, ~0ull - 0xFFF, ~0ull - 1, ~0ull}) {
    SCOPED_TRACE(target);
    pmu::testing::FakeGuestMemory mem;
    idt_to(mem, target);
    // Nothing is mapped there (what the search cannot read counts as int3): it ends, having
    // found nothing.
    KernelEntryPoints entries;
    entries.refresh(mem, 0, kIdt, 256 * 16 - 1);
    EXPECT_TRUE(entries.by_priority().empty());
  }
}

TEST(KernelEntryPoints, LstarAtTheTopOfTheAddressSpaceIsSearchedWithoutWrapping) {
  pmu::testing::FakeGuestMemory mem;
  idt_to(mem, 0xffffffff81000000ull);
  KernelEntryPoints entries;
  entries.refresh(mem, ~0ull - 0x2800, kIdt, 256 * 16 - 1);
  EXPECT_EQ(entries.syscall_entry(), ~0ull - 0x2800);
}

// A state with more return sites than a search ever keeps (a crafted snapshot: the sites were not
// capped on load) is refused.
TEST(KernelEntryPoints, AStateWithMoreSitesThanTheBudgetIsRefused) {
  struct Crafted {
    uint64_t lstar = 0, idt_base = 0;
    uint16_t idt_limit = 0;
    bool known = true;
    std::vector<ReturnSite> sites = std::vector<ReturnSite>(KernelEntryPoints::kMaxSites + 1);
    std::vector<uint8_t> gates;  // an empty list looks the same
    void archive(pmu::StateWriter& a) { a(lstar, idt_base, idt_limit, known, sites, gates); }
  } crafted;
  pmu::StateWriter w;
  w(crafted);
  KernelEntryPoints entries;
  pmu::StateReader r(w.bytes());
  try {
    r(entries);
    ADD_FAILURE() << "loaded";
  } catch (const pmu::StateFormatError& e) {
    EXPECT_EQ(std::string(e.what()),
              "kernel entry points: 17 return sites (at most 16), 0 gates (at most 256)");
  }
}

}  // namespace
}  // namespace vmm
