#include "vmm/memory/page_walker.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

namespace vmm {
namespace {

constexpr uint64_t kPresent = 1ull << 0;
constexpr uint64_t kWritable = 1ull << 1;
constexpr uint64_t kUser = 1ull << 2;
constexpr uint64_t kAccessed = 1ull << 5;
constexpr uint64_t kDirty = 1ull << 6;  // in the entry that maps a page (PTE, or a large PDE/PDPTE)
constexpr uint64_t kLargePage = 1ull << 7;
constexpr uint64_t kExecuteDisable = 1ull << 63;
constexpr uint64_t kAddressMask = 0x000FFFFFFFFFF000ull;  // bits 51:12

bool canonical(uint64_t linear) {
  const int64_t s = static_cast<int64_t>(linear << 16) >> 16;  // sign-extend bit 47
  return static_cast<uint64_t>(s) == linear;
}

}  // namespace

std::optional<Translation> translate(const GuestRam& ram, uint64_t cr3, uint64_t linear) {
  std::variant<Translation, WalkFailure> w = walk(ram, cr3, linear);
  if (auto* t = std::get_if<Translation>(&w)) return *t;
  return std::nullopt;
}

std::variant<Translation, WalkFailure> walk(const GuestRam& ram, uint64_t cr3, uint64_t linear) {
  if (!canonical(linear)) return WalkFailure::kNotCanonical;
  Translation t{.gpa = 0, .user = true, .writable = true, .executable = true, .accessed = true};
  uint64_t table = cr3 & kAddressMask;
  // Levels: PML4 (bits 47:39), PDPT (38:30), PD (29:21), PT (20:12).
  for (int level = 3; level >= 0; --level) {
    const int shift = 12 + 9 * level;
    const uint64_t index = (linear >> shift) & 0x1FF;
    uint64_t entry = 0;
    if (!ram.read_u64(table + index * 8, entry)) return WalkFailure::kTableOutsideRam;
    if (!(entry & kPresent)) return WalkFailure::kNotPresent;
    t.user = t.user && (entry & kUser);
    t.writable = t.writable && (entry & kWritable);
    t.executable = t.executable && !(entry & kExecuteDisable);
    t.accessed = t.accessed && (entry & kAccessed);
    const bool large = (entry & kLargePage) && (level == 1 || level == 2);
    if ((entry & kLargePage) && level == 3)
      return WalkFailure::kReserved;  // PS is reserved in a PML4E
    if (large || level == 0) {
      const uint64_t page = 1ull << shift;
      t.page_size = page;
      t.gpa = (entry & kAddressMask & ~(page - 1)) | (linear & (page - 1));
      t.dirty = (entry & kDirty) != 0;
      return t;
    }
    table = entry & kAddressMask;
  }
  return WalkFailure::kReserved;  // not reached
}

std::optional<Translation> walk_and_mark(GuestRam& ram, uint64_t cr3, uint64_t linear, bool write) {
  std::optional<Translation> t = translate(ram, cr3, linear);
  if (!t) return std::nullopt;
  uint64_t table = cr3 & kAddressMask;
  for (int level = 3; level >= 0; --level) {
    const int shift = 12 + 9 * level;
    const uint64_t entry_gpa = table + ((linear >> shift) & 0x1FF) * 8;
    // Another vCPU may have changed the tables since walk(): every entry is looked up again.
    std::byte* host = ram.host(entry_gpa, 8);
    if (host == nullptr) return std::nullopt;
    std::atomic_ref<uint64_t> ref(*reinterpret_cast<uint64_t*>(host));  // 8-aligned: table + 8i
    const uint64_t value = ref.load(std::memory_order_relaxed);
    if (!(value & kPresent)) return std::nullopt;
    const bool leaf = level == 0 || ((value & kLargePage) && (level == 1 || level == 2));
    const uint64_t marks = kAccessed | (leaf && write ? kDirty : 0);
    if ((value & marks) != marks) {
      ref.fetch_or(marks);
      ram.note_written(entry_gpa, 8);
    }
    if (leaf) break;
    table = value & kAddressMask;
  }
  return t;
}

template <typename Ok, typename Fn>
bool PagedGuestMemory::for_each_piece(uint64_t linear, uint64_t length, Ok ok, Fn fn) {
  if (length == 0) return true;
  if (linear + length < linear) return false;
  struct Piece {
    uint64_t gpa, offset, size;
  };
  std::vector<Piece> pieces;
  uint64_t done = 0;
  while (done < length) {
    const uint64_t address = linear + done;
    std::optional<Translation> t = translate(ram_, cr3_, address);
    if (!t || !ok(*t)) return false;
    const uint64_t in_page = t->page_size - (address & (t->page_size - 1));
    const uint64_t size = std::min(in_page, length - done);
    if (!ram_.contains(t->gpa, size)) return false;
    pieces.push_back({t->gpa, done, size});
    done += size;
  }
  for (const Piece& p : pieces) fn(p.gpa, p.offset, p.size);
  return true;
}

bool PagedGuestMemory::read(uint64_t linear, std::span<std::byte> out) {
  // LWP reads only structures the user program owns (LWPCB): user mode must reach it.
  return copy_out(linear, out, [this](const Translation& t) { return t.user || supervisor_; });
}

bool PagedGuestMemory::fetch(uint64_t linear, std::span<std::byte> out) {
  return copy_out(linear, out,
                  [this](const Translation& t) { return t.executable && (t.user || supervisor_); });
}

template <typename Ok>
bool PagedGuestMemory::copy_out(uint64_t linear, std::span<std::byte> out, Ok ok) {
  return for_each_piece(linear, out.size(), ok, [&](uint64_t gpa, uint64_t offset, uint64_t size) {
    std::memcpy(out.data() + offset, ram_.host(gpa, size), size);
  });
}

bool PagedGuestMemory::write(uint64_t linear, std::span<const std::byte> in) {
  // LWP writes on behalf of the user program: user-mode permissions apply (§5.3). PEBS writes
  // the kernel's DS buffer: supervisor permissions.
  return for_each_piece(
      linear, in.size(),
      [this](const Translation& t) { return t.writable && (t.user || supervisor_); },
      [&](uint64_t gpa, uint64_t offset, uint64_t size) {
        std::memcpy(ram_.host(gpa, size), in.data() + offset, size);
        ram_.note_written(gpa, size);
      });
}

pmu::WriteProbe PagedGuestMemory::probe_user_write(uint64_t linear, uint64_t length) {
  using pmu::WriteFault;
  if (length == 0) return {};
  if (linear + length < linear) return {WriteFault::kUnreachable, linear};
  uint64_t done = 0;
  while (done < length) {
    const uint64_t address = linear + done;
    std::variant<Translation, WalkFailure> w = walk(ram_, cr3_, address);
    if (auto* failure = std::get_if<WalkFailure>(&w))
      return {
          *failure == WalkFailure::kNotPresent ? WriteFault::kNotPresent : WriteFault::kUnreachable,
          address};
    const Translation& t = std::get<Translation>(w);
    if (!t.user || !t.writable) return {WriteFault::kProtection, address};
    const uint64_t in_page = t.page_size - (address & (t.page_size - 1));
    const uint64_t size = std::min(in_page, length - done);
    if (!ram_.contains(t.gpa, size)) return {WriteFault::kUnreachable, address};
    done += size;
  }
  return {};
}

}  // namespace vmm
