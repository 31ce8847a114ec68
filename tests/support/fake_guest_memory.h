// A flat, sparse guest memory for tests: linear == physical, pages mapped explicitly as
// read-only or writable, every access logged. Unmapped bytes fail like a missing mapping would.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <vector>

#include "pmu/guest_memory.h"

namespace pmu::testing {

class FakeGuestMemory : public GuestMemory {
 public:
  static constexpr uint64_t kPageSize = 4096;

  struct Access {
    uint64_t address;
    uint64_t length;
  };

  // Maps [base, base + length) (rounded out to pages), zero-filled.
  void map(uint64_t base, uint64_t length, bool writable = true) {
    for (uint64_t page = base & ~(kPageSize - 1); page < base + length; page += kPageSize) {
      Page& p = pages_[page];
      p.bytes.resize(kPageSize);
      p.writable = writable;
    }
  }
  void unmap(uint64_t base, uint64_t length) {
    for (uint64_t page = base & ~(kPageSize - 1); page < base + length; page += kPageSize)
      pages_.erase(page);
  }
  void set_writable(uint64_t base, uint64_t length, bool writable) {
    for (uint64_t page = base & ~(kPageSize - 1); page < base + length; page += kPageSize)
      if (auto it = pages_.find(page); it != pages_.end()) it->second.writable = writable;
  }
  // Makes mapped pages translate to addresses outside guest RAM: every access fails, and
  // probe_user_write reports kUnreachable (no #PF could fix it).
  void set_outside_ram(uint64_t base, uint64_t length, bool outside = true) {
    for (uint64_t page = base & ~(kPageSize - 1); page < base + length; page += kPageSize)
      if (auto it = pages_.find(page); it != pages_.end()) it->second.outside_ram = outside;
  }

  bool read(uint64_t linear, std::span<std::byte> out) override {
    reads_.push_back({linear, out.size()});
    if (!all_mapped(linear, out.size(), false)) return false;
    for (size_t i = 0; i < out.size(); ++i) out[i] = byte_at(linear + i);
    return true;
  }
  bool write(uint64_t linear, std::span<const std::byte> in) override {
    if (!all_mapped(linear, in.size(), true)) {
      ++failed_writes_;
      return false;
    }
    writes_.push_back({linear, in.size()});
    for (size_t i = 0; i < in.size(); ++i) byte_at(linear + i) = in[i];
    return true;
  }
  WriteProbe probe_user_write(uint64_t linear, uint64_t length) override {
    ++probes_;
    if (length == 0) return {};
    if (linear + length < linear) return {WriteFault::kUnreachable, linear};
    for (uint64_t page = linear & ~(kPageSize - 1); page < linear + length; page += kPageSize) {
      const uint64_t first = page < linear ? linear : page;
      auto it = pages_.find(page);
      if (it == pages_.end()) return {WriteFault::kNotPresent, first};
      if (it->second.outside_ram) return {WriteFault::kUnreachable, first};
      if (!it->second.writable) return {WriteFault::kProtection, first};
      if (page + kPageSize < page) break;
    }
    return {};
  }

  // Test-side access that bypasses logging and permissions.
  void poke(uint64_t linear, std::span<const std::byte> in) {
    for (size_t i = 0; i < in.size(); ++i) byte_at(linear + i) = in[i];
  }
  std::vector<std::byte> peek(uint64_t linear, size_t length) {
    std::vector<std::byte> out(length);
    for (size_t i = 0; i < length; ++i) out[i] = byte_at(linear + i);
    return out;
  }
  void poke_u32(uint64_t linear, uint32_t v) { poke_le(linear, v, 4); }
  void poke_u64(uint64_t linear, uint64_t v) { poke_le(linear, v, 8); }
  uint32_t peek_u32(uint64_t linear) { return static_cast<uint32_t>(peek_le(linear, 4)); }
  uint64_t peek_u64(uint64_t linear) { return peek_le(linear, 8); }

  const std::vector<Access>& writes() const { return writes_; }
  const std::vector<Access>& reads() const { return reads_; }
  uint64_t failed_writes() const { return failed_writes_; }
  uint64_t probes() const { return probes_; }
  void clear_log() {
    writes_.clear();
    reads_.clear();
    failed_writes_ = 0;
  }

 private:
  struct Page {
    std::vector<std::byte> bytes;
    bool writable = true;
    bool outside_ram = false;
  };

  bool all_mapped(uint64_t linear, uint64_t length, bool need_write) const {
    if (length == 0) return true;
    if (linear + length < linear) return false;  // wraps the address space
    for (uint64_t page = linear & ~(kPageSize - 1); page < linear + length; page += kPageSize) {
      auto it = pages_.find(page);
      if (it == pages_.end() || it->second.outside_ram) return false;
      if (need_write && !it->second.writable) return false;
      if (page + kPageSize < page) break;
    }
    return true;
  }
  std::byte& byte_at(uint64_t linear) {
    Page& p = pages_[linear & ~(kPageSize - 1)];
    if (p.bytes.empty()) p.bytes.resize(kPageSize);
    return p.bytes[linear & (kPageSize - 1)];
  }
  void poke_le(uint64_t linear, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) byte_at(linear + i) = static_cast<std::byte>(v >> (8 * i));
  }
  uint64_t peek_le(uint64_t linear, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(byte_at(linear + i)) << (8 * i);
    return v;
  }

  std::map<uint64_t, Page> pages_;
  std::vector<Access> writes_;
  std::vector<Access> reads_;
  uint64_t failed_writes_ = 0;
  uint64_t probes_ = 0;
};

}  // namespace pmu::testing
