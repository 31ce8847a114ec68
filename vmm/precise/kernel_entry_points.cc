#include "vmm/precise/kernel_entry_points.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace vmm {
namespace {

constexpr uint64_t kPage = 4096;

// The end of the window after a guest address: at most the end of the address space (LSTAR and
// the gates are guest values, 2^64 - 1 among them).
uint64_t window_end(uint64_t begin) {
  return begin > ~uint64_t{0} - KernelEntryPoints::kWindow ? ~uint64_t{0}
                                                           : begin + KernelEntryPoints::kWindow;
}

// The return site an instruction is, if it is one.
std::optional<ReturnSite::Kind> return_kind(const ZydisDecodedInstruction& insn) {
  switch (insn.mnemonic) {
    case ZYDIS_MNEMONIC_IRETQ: return ReturnSite::Kind::kIret;
    case ZYDIS_MNEMONIC_IRET:
    case ZYDIS_MNEMONIC_IRETD:
    case ZYDIS_MNEMONIC_SYSEXIT: return ReturnSite::Kind::kReturn32;
    case ZYDIS_MNEMONIC_SYSRET:
      return insn.operand_width == 64 ? ReturnSite::Kind::kSysret64 : ReturnSite::Kind::kReturn32;
    default: return std::nullopt;
  }
}

}  // namespace

void KernelEntryPoints::refresh(pmu::GuestMemory& kernel, uint64_t lstar, uint64_t idt_base,
                                uint16_t idt_limit) {
  if (known_ && lstar == lstar_ && idt_base == idt_base_ && idt_limit == idt_limit_) return;
  lstar_ = lstar, idt_base_ = idt_base, idt_limit_ = idt_limit;
  known_ = true;
  read_gates(kernel);
  std::vector<uint64_t> entries;
  if (lstar != 0) entries.push_back(lstar);
  for (const GateEntry& g : gates_)
    if (g.present) entries.push_back(g.target);
  std::sort(entries.begin(), entries.end());
  entries.erase(std::unique(entries.begin(), entries.end()), entries.end());
  const std::vector<ReturnSite> before = std::move(sites_);
  sites_.clear();
  // The windows after the entry points, merged where they overlap, each decoded once.
  for (size_t i = 0; i < entries.size();) {
    const uint64_t begin = entries[i];
    uint64_t end = window_end(begin);
    for (++i; i < entries.size() && entries[i] <= end; ++i) end = window_end(entries[i]);
    search(kernel, begin, end);
  }
  for (ReturnSite& s : sites_)
    for (const ReturnSite& old : before)
      if (old.rip == s.rip) s.seen_returning_to_user = old.seen_returning_to_user;
}

void KernelEntryPoints::read_gates(pmu::GuestMemory& kernel) {
  gates_.assign(256, GateEntry{});
  const size_t count = std::min<size_t>(256, (static_cast<size_t>(idt_limit_) + 1) / 16);
  for (size_t v = 0; v < count; ++v) {
    std::array<uint8_t, 16> g{};
    if (!kernel.read(idt_base_ + 16 * v, std::as_writable_bytes(std::span(g)))) continue;
    const uint8_t type_attr = g[5];
    if (!(type_attr & 0x80)) continue;  // P
    const uint8_t type = type_attr & 0x0F;
    if (type != 0xE && type != 0xF) continue;  // 64-bit interrupt or trap gate
    uint64_t target = 0;
    target |= static_cast<uint64_t>(g[0]) | static_cast<uint64_t>(g[1]) << 8;
    target |= static_cast<uint64_t>(g[6]) << 16 | static_cast<uint64_t>(g[7]) << 24;
    uint32_t high = 0;
    std::memcpy(&high, &g[8], 4);
    target |= static_cast<uint64_t>(high) << 32;
    gates_[v] = GateEntry{target, static_cast<uint8_t>((type_attr >> 5) & 3), true,
                          static_cast<uint8_t>(g[4] & 7)};
  }
}

void KernelEntryPoints::search(pmu::GuestMemory& kernel, uint64_t begin, uint64_t end) {
  // Linear decoding: x86 resynchronises within a few instructions after data or padding, and a
  // false find costs only a breakpoint that never fires at a return to user mode.
  // [begin, end) may reach the top of the address space: pages are counted, never compared
  // after an addition that could wrap.
  if (end <= begin) return;
  std::vector<uint8_t> code;
  code.reserve(end - begin);
  const uint64_t first = begin & ~(kPage - 1), last = (end - 1) & ~(kPage - 1);
  for (uint64_t n = 0; n <= (last - first) / kPage; ++n) {
    const uint64_t page = first + n * kPage;
    std::array<uint8_t, kPage> bytes{};
    if (!kernel.read(page, std::as_writable_bytes(std::span(bytes)))) bytes.fill(0xCC);
    const uint64_t from = std::max(page, begin) - page;
    const uint64_t to = std::min(page + (kPage - 1), end - 1) - page + 1;
    code.insert(code.end(), bytes.begin() + from, bytes.begin() + to);
  }
  ZydisDecoder decoder;
  ZydisDecoderInit(&decoder, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
  ZydisDecodedInstruction insn;
  for (size_t at = 0; at < code.size();) {
    if (!ZYAN_SUCCESS(ZydisDecoderDecodeInstruction(&decoder, nullptr, code.data() + at,
                                                    code.size() - at, &insn))) {
      ++at;
      continue;
    }
    if (const auto kind = return_kind(insn); kind && sites_.size() < kMaxSites) {
      const uint64_t rip = begin + at;
      if (!site_at(rip)) sites_.push_back(ReturnSite{rip, *kind, false});
    }
    at += insn.length;
  }
}

std::vector<ReturnSite> KernelEntryPoints::by_priority(bool exception_first) const {
  std::vector<ReturnSite> out = sites_;
  auto rank = [exception_first](const ReturnSite& s) {
    const bool seen = s.seen_returning_to_user;
    if (exception_first) {
      switch (s.kind) {
        case ReturnSite::Kind::kIret: return seen ? 0 : 1;
        case ReturnSite::Kind::kSysret64: return seen ? 2 : 3;
        case ReturnSite::Kind::kReturn32: return 4;
      }
    }
    if (seen) return 0;
    switch (s.kind) {
      case ReturnSite::Kind::kSysret64: return 1;
      case ReturnSite::Kind::kIret: return 2;
      case ReturnSite::Kind::kReturn32: return 3;
    }
    return 3;
  };
  const uint64_t lstar = lstar_;
  std::stable_sort(out.begin(), out.end(), [&](const ReturnSite& a, const ReturnSite& b) {
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    auto distance = [&](uint64_t rip) { return rip > lstar ? rip - lstar : lstar - rip; };
    return distance(a.rip) < distance(b.rip);
  });
  return out;
}

const ReturnSite* KernelEntryPoints::site_at(uint64_t rip) const {
  for (const ReturnSite& s : sites_)
    if (s.rip == rip) return &s;
  return nullptr;
}

void KernelEntryPoints::saw_user_return(uint64_t rip) {
  for (ReturnSite& s : sites_)
    if (s.rip == rip) s.seen_returning_to_user = true;
}

std::optional<uint64_t> KernelEntryPoints::user_interrupt_entry(uint8_t vector) const {
  if (vector >= gates_.size() || !gates_[vector].present || gates_[vector].dpl < 3)
    return std::nullopt;
  return gates_[vector].target;
}

uint8_t KernelEntryPoints::interrupt_stack(uint8_t vector) const {
  if (vector >= gates_.size() || !gates_[vector].present) return 0;
  return gates_[vector].ist;
}

std::optional<uint64_t> KernelEntryPoints::debug_handler() const {
  if (gates_.size() < 2 || !gates_[1].present) return std::nullopt;
  return gates_[1].target;
}

}  // namespace vmm
