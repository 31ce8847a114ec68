// Shared fixture for the LWP conformance suite: builds LWPCBs in FakeGuestMemory byte by byte at
// the DESIGN §4.2 offsets (independently of pmu/lwp/lwpcb.cc), drives an LwpUnit, and decodes the
// ring buffer with its own little-endian reader (independently of pmu/lwp/event_record.cc).
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "pmu/lwp/architecture.h"
#include "pmu/lwp/capabilities.h"
#include "pmu/lwp/event_record.h"
#include "pmu/lwp/lwp_unit.h"
#include "pmu/retired_instruction.h"
#include "tests/support/fake_guest_memory.h"
#include "tests/support/recording_interrupt_sink.h"
#include "tests/support/recording_page_fault_sink.h"

namespace pmu::lwp::conformance {

using pmu::testing::FakeGuestMemory;
using pmu::testing::RecordingInterruptSink;
using pmu::testing::RecordingPageFaultSink;

// A processor with every proposal feature: 3 events, n = 10, data address, both filters, INT.
inline Capabilities FullCaps() {
  Capabilities c;
  c.available = true;
  c.interrupt = true;
  c.instructions_retired = true;
  c.branches_retired = true;
  c.dcache_misses = true;
  c.max_events = 3;
  c.cache_max_bits = 10;
  c.data_address = true;
  c.cache_level_filter = true;
  c.cache_latency_filter = true;
  c.version = 1;
  return c;
}

inline constexpr uint64_t kMsr0AllFeatures =
    msr0::kEnabled | msr0::kIre | msr0::kBre | msr0::kDme | msr0::kInterrupt;
inline constexpr uint8_t kVector = 0x42;
inline constexpr uint64_t msr0_vector(uint8_t v) { return uint64_t{v} << msr0::kVectorShift; }

inline constexpr uint64_t kLwpcbAddr = 0x10000;   // one page, writable
inline constexpr uint64_t kLwpcbAddr2 = 0x11000;  // a second LWPCB page
inline constexpr uint64_t kBufferAddr = 0x20000;  // ring buffers: 0x20000..0x27FFF mapped
inline constexpr uint64_t kBuffer2Addr = 0x24000;
inline constexpr uint64_t kRip0 = 0x401000;

// What a test writes into guest memory as an LWPCB (all fields raw, as software would write them).
struct SlotSpec {
  uint8_t event_id = 0;
  uint32_t interval = 0;
  uint32_t counter = 0;
};
struct CbSpec {
  uint32_t flags = 0;
  uint32_t buffer_size = 8 * 32;
  uint8_t random = 0;
  uint64_t buffer_base = kBufferAddr;
  uint32_t head = 0;
  uint32_t tail = 0;
  uint64_t missed = 0;
  uint32_t threshold = 0;
  uint32_t filters = 0;
  std::vector<SlotSpec> slots;
};

inline void PokeLwpcb(FakeGuestMemory& mem, uint64_t at, const CbSpec& cb) {
  mem.poke_u32(at + 0, cb.flags);
  mem.poke_u32(at + 4, (cb.buffer_size & 0x0FFFFFFFu) | (uint32_t{cb.random} << 28));
  mem.poke_u64(at + 8, cb.buffer_base);
  mem.poke_u32(at + 16, cb.head);
  mem.poke_u32(at + 20, cb.tail);
  mem.poke_u64(at + 24, cb.missed);
  mem.poke_u32(at + 32, cb.threshold);
  mem.poke_u32(at + 36, cb.filters);
  for (size_t i = 0; i < cb.slots.size(); ++i) {
    mem.poke_u32(at + 40 + 8 * i,
                 (cb.slots[i].interval & 0x03FFFFFFu) | (uint32_t{cb.slots[i].event_id} << 26));
    mem.poke_u32(at + 44 + 8 * i, cb.slots[i].counter);
  }
}

// Little-endian reads of an event record image.
inline uint64_t Le(const std::byte* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

struct Rec {
  uint8_t id = 0;
  uint8_t core = 0;
  uint32_t dword0 = 0;  // whole first dword (flags are bits 16:31)
  uint32_t data = 0;
  uint64_t rip = 0;
  uint64_t address = 0;
  uint64_t reserved = 0;
};
inline Rec ParseRecord(const std::vector<std::byte>& b) {
  Rec r;
  r.id = static_cast<uint8_t>(b[0]);
  r.core = static_cast<uint8_t>(b[1]);
  r.dword0 = static_cast<uint32_t>(Le(&b[0], 4));
  r.data = static_cast<uint32_t>(Le(&b[4], 4));
  r.rip = Le(&b[8], 8);
  r.address = Le(&b[16], 8);
  r.reserved = Le(&b[24], 8);
  return r;
}
inline std::vector<std::byte> Bytes(const EventRecordBytes& a) {
  return std::vector<std::byte>(a.begin(), a.end());
}

// Instruction builders. RIPs are distinct per index so records identify their instruction.
inline uint64_t RipOf(int i) { return kRip0 + 4 * static_cast<uint64_t>(i); }

inline RetiredInstruction Plain(uint64_t rip, uint8_t cpl = 3) {
  RetiredInstruction insn;
  insn.rip = rip;
  insn.cpl = cpl;
  return insn;
}
inline RetiredInstruction Branch(uint64_t rip, BranchKind kind, bool taken = true,
                                 uint64_t next = 0, bool pred_valid = false, bool pred_ok = false) {
  RetiredInstruction insn = Plain(rip);
  insn.branch.kind = kind;
  insn.branch.taken = taken;
  insn.branch.next_rip = next ? next : rip + 0x100;
  insn.branch.prediction_valid = pred_valid;
  insn.branch.predicted_correctly = pred_ok;
  return insn;
}
inline RetiredInstruction Load(uint64_t rip, uint64_t data, uint32_t latency, DataSource src) {
  RetiredInstruction insn = Plain(rip);
  insn.cache_misses[0] = CacheMiss{data, latency, src};
  insn.cache_miss_count = 1;
  return insn;
}

class LwpFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    mem.map(kLwpcbAddr, 0x2000);
    mem.map(kBufferAddr, 0x8000);
  }

  // Creates the unit (call again after changing caps/config).
  void MakeUnit() {
    unit = std::make_unique<LwpUnit>(caps, config, mem, sink, &page_faults);
    stored.clear();
    unit->set_record_observer([this](const StoredRecord& r) { stored.push_back(r); });
  }

  void SetMsr0(uint64_t value) {
    ASSERT_EQ(unit->write_msr(kMsrLwpFeatureEnable, value, 0), MsrResult::kOk) << std::hex << value;
  }

  MsrResult Llwpcb(uint64_t address, uint8_t cpl = 3) {
    return unit->write_msr(kMsrLwpControlBlock, address, cpl);
  }
  uint64_t Slwpcb(uint8_t cpl = 3) {
    uint64_t v = 0xDEADBEEF;
    EXPECT_EQ(unit->read_msr(kMsrLwpControlBlock, cpl, v), MsrResult::kOk);
    return v;
  }

  // Unit with full caps, LWPMSR0 = everything + vector, and `cb` loaded at CPL 3.
  void Start(const CbSpec& cb, uint64_t msr0 = kMsr0AllFeatures | msr0_vector(kVector)) {
    if (!unit) MakeUnit();
    SetMsr0(msr0);
    PokeLwpcb(mem, kLwpcbAddr, cb);
    ASSERT_EQ(Llwpcb(kLwpcbAddr, 3), MsrResult::kOk);
  }

  // Disables LWP (so the flush of §5.3 lands before the rewrite), rewrites the LWPCB at `at` and
  // loads it again at CPL 3.
  void Reload(uint64_t at, const CbSpec& cb) {
    ASSERT_EQ(Llwpcb(0, 3), MsrResult::kOk);
    PokeLwpcb(mem, at, cb);
    ASSERT_EQ(Llwpcb(at, 3), MsrResult::kOk);
  }

  void RetirePlain(int from, int count) {
    for (int i = from; i < from + count; ++i) unit->retire(Plain(RipOf(i)));
  }

  Rec RecordAt(uint64_t buffer, uint32_t offset) {
    return ParseRecord(mem.peek(buffer + offset, 32));
  }
  uint32_t CbU32(uint32_t off, uint64_t at = kLwpcbAddr) { return mem.peek_u32(at + off); }
  uint64_t CbU64(uint32_t off, uint64_t at = kLwpcbAddr) { return mem.peek_u64(at + off); }
  uint32_t CbHead(uint64_t at = kLwpcbAddr) { return CbU32(16, at); }
  uint32_t CbCounter(int slot, uint64_t at = kLwpcbAddr) {
    return CbU32(44 + 8 * slot, at) & 0x03FFFFFFu;
  }

  // Number of logged reads that cover any byte of [addr, addr + len).
  size_t ReadsCovering(uint64_t addr, uint64_t len) const {
    size_t n = 0;
    for (const auto& a : mem.reads())
      if (a.address < addr + len && addr < a.address + a.length) ++n;
    return n;
  }
  size_t WritesCovering(uint64_t addr, uint64_t len) const {
    size_t n = 0;
    for (const auto& a : mem.writes())
      if (a.address < addr + len && addr < a.address + a.length) ++n;
    return n;
  }

  FakeGuestMemory mem;
  RecordingInterruptSink sink;
  RecordingPageFaultSink page_faults;
  Capabilities caps = FullCaps();
  UnitConfig config{};
  std::unique_ptr<LwpUnit> unit;
  std::vector<StoredRecord> stored;
};

}  // namespace pmu::lwp::conformance
