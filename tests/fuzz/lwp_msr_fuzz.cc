// libFuzzer target for the virtual LWP unit (pmu/lwp/lwp_unit.h). Build and run with
// tests/fuzz/run_fuzzer.sh lwp_msr_fuzz (clang, -fsanitize=fuzzer,address,undefined).
//
// The input is a program. Header (missing bytes read as zero):
//   byte 0      capability bits: 0 interrupt, 1 IRE, 2 BRE, 3 DME, 4 data address, 5 CLF,
//               6 latency filter (a DCache-capable profile without a filter gets the latency one)
//   byte 1      LWPMaxEvents = 1 + b % 26
//   byte 2      LWPCacheMax  = 10 + b % 22
//   byte 3      core id
//   bytes 4-11  PRNG seed (little-endian)
// then operations until the input ends, each an opcode byte (taken % 16) and its operands:
//   0 WRMSR LWPMSR0     mode, value, cpl          8 save()                  -
//   1 RDMSR             which (0/1/other), cpl     9 restore(saved[i])       i
//   2 LLWPCB            address, cpl              10 restore(SaveArea{})     -
//   3 raw bytes         address, len, bytes       11 state round trip        position, xor
//   4 LWPCB template    address, fields           12 deserialize+load_state  len, bytes
//   5 write u32         address, value            13 page map/unmap/protect  page, action
//   6 retire burst      n, instructions           14 reset()                 -
//   7 enter_user()      -                         15 consumer: tail = head   -
// Addresses: a mode byte, then either a raw 64-bit value, an offset into one of the pages the
// program uses, or an offset from the current LWPCB pointer.
//
// Checked on every input: no crash, no sanitizer report, and (__builtin_trap otherwise)
//  * every write the unit makes lies inside the LWPCB it holds [addr, addr + 40 + 8*MaxEvents)
//    or inside a buffer [BufferBase & ~31, + BufferSize) described by that LWPCB while it was
//    held (size nonzero and a multiple of 32, as validation demands);
//  * LWPMSR0 never holds an undefined bit, WRMSR of one is #GP and WRMSR of a value software may
//    write succeeds; no NMI is ever raised; a threshold interrupt uses LWPMSR0's vector;
//  * state() survives serialize -> deserialize unchanged, and load_state() accepts it;
//  * whatever deserialize() accepts re-serialises to the same state.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <span>
#include <utility>
#include <variant>
#include <vector>

#include "pmu/lwp/architecture.h"
#include "pmu/lwp/capabilities.h"
#include "pmu/lwp/lwp_unit.h"
#include "pmu/lwp/save_area.h"
#include "pmu/retired_instruction.h"
#include "tests/support/fake_guest_memory.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/support/recording_interrupt_sink.h"
#include "tests/support/recording_page_fault_sink.h"

namespace {

using pmu::BranchKind;
using pmu::DataSource;
using pmu::RetiredInstruction;
using pmu::testing::FakeGuestMemory;
using pmu::testing::RecordingInterruptSink;
using pmu::testing::RecordingPageFaultSink;
namespace lwp = pmu::lwp;

using pmuvm_fuzz::Input;

constexpr uint64_t kPage = FakeGuestMemory::kPageSize;
constexpr uint64_t kPages[] = {0x10000, 0x11000, 0x12000, 0x20000, 0x21000,
                               0x22000, 0x23000, 0x24000, 0x30000};
constexpr size_t kPageCount = sizeof(kPages) / sizeof(kPages[0]);
constexpr uint64_t kMsr0Defined = 0xFull | (1ull << 31) | (0xFFull << 40);

bool inside(uint64_t a, uint64_t alen, uint64_t s, uint64_t slen) {
  using U = unsigned __int128;
  return U{a} >= U{s} && U{a} + alen <= U{s} + slen;
}

struct Harness {
  Harness(const lwp::Capabilities& c, const lwp::UnitConfig& cfg)
      : caps(c), unit(c, cfg, mem, sink, &page_faults) {
    mem.map(0x10000, 3 * kPage, true);
    mem.map(0x20000, 4 * kPage, true);
    mem.map(0x30000, kPage, false);
    for (uint64_t p : {0x10000ull, 0x11000ull, 0x12000ull, 0x20000ull, 0x21000ull, 0x22000ull,
                       0x23000ull, 0x30000ull})
      pages.insert(p);
  }

  bool mapped(uint64_t a, uint64_t n) const {
    if (n == 0) return true;
    if (a + n < a) return false;
    for (uint64_t page = a & ~(kPage - 1); page < a + n; page += kPage) {
      if (!pages.count(page)) return false;
      if (page + kPage < page) break;
    }
    return true;
  }
  // Writes only to mapped pages: FakeGuestMemory::poke would create missing pages.
  void poke(uint64_t a, const std::vector<std::byte>& bytes) {
    for (size_t i = 0; i < bytes.size(); ++i)
      if (mapped(a + i, 1)) mem.poke(a + i, std::span<const std::byte>(&bytes[i], 1));
  }

  void admit(uint64_t a) {
    if (a == 0) return;
    allowed.insert({a, caps.lwpcb_size()});
    if (!mapped(a, 16)) return;
    const uint32_t size = mem.peek_u32(a + lwp::lwpcb::kBufferSize) & lwp::lwpcb::kBufferSizeMask;
    const uint64_t base =
        mem.peek_u64(a + lwp::lwpcb::kBufferBase) & ~lwp::lwpcb::kBufferBaseIgnoredMask;
    if (size != 0 && size % 32 == 0) allowed.insert({base, size});
  }

  // After every operation: the containment invariant and a few cheap ones.
  void check(size_t vectors_before) {
    admit(unit.lwpcb_address());
    const auto& writes = mem.writes();
    for (size_t i = writes_seen; i < writes.size(); ++i) {
      bool ok = false;
      for (const auto& [s, len] : allowed)
        if (inside(writes[i].address, writes[i].length, s, len)) {
          ok = true;
          break;
        }
      FUZZ_CHECK(ok);
    }
    writes_seen = writes.size();
    // #PF traps (DESIGN §4.1): a record address inside an admitted buffer, U|W (+P), and only
    // where a user write really fails, as the page is now (nothing runs between store and here).
    for (size_t i = faults_seen; i < page_faults.faults.size(); ++i) {
      const auto& f = page_faults.faults[i];
      FUZZ_CHECK(f.error_code == 6 || f.error_code == 7);
      FUZZ_CHECK(f.linear % 32 == 0);
      FUZZ_CHECK((f.error_code == 7) == mapped(f.linear, 1));
      bool in_buffer = false;
      for (const auto& [s, len] : allowed) in_buffer = in_buffer || inside(f.linear, 32, s, len);
      FUZZ_CHECK(in_buffer);
    }
    faults_seen = page_faults.faults.size();
    FUZZ_CHECK((unit.lwpmsr0() & ~kMsr0Defined) == 0);
    FUZZ_CHECK(sink.nmis == 0);
    for (size_t i = vectors_before; i < sink.vectors.size(); ++i)
      FUZZ_CHECK(sink.vectors[i] ==
                 static_cast<uint8_t>(unit.lwpmsr0() >> lwp::msr0::kVectorShift));
  }

  uint64_t address(Input& in) {
    const uint8_t mode = in.u8();
    switch (mode % 4) {
      case 0: return in.u64();
      case 1: return unit.lwpcb_address() + (in.u8() % 64);
      default: return kPages[in.u8() % kPageCount] + (in.u16() % 0x1100);
    }
  }

  lwp::Capabilities caps;
  FakeGuestMemory mem;
  RecordingInterruptSink sink;
  RecordingPageFaultSink page_faults;
  lwp::LwpUnit unit;
  std::set<uint64_t> pages;
  std::set<std::pair<uint64_t, uint64_t>> allowed;
  size_t writes_seen = 0;
  size_t faults_seen = 0;
  std::vector<lwp::SaveArea> saved;
};

lwp::Capabilities caps_from(Input& in) {
  const uint8_t bits = in.u8();
  lwp::Capabilities c;
  c.available = true;
  c.interrupt = bits & 1;
  c.instructions_retired = bits & 2;
  c.branches_retired = bits & 4;
  c.dcache_misses = bits & 8;
  c.data_address = bits & 16;
  c.cache_level_filter = bits & 32;
  c.cache_latency_filter = bits & 64;
  if (c.dcache_misses && !c.cache_level_filter && !c.cache_latency_filter)
    c.cache_latency_filter = true;
  c.max_events = static_cast<uint8_t>(1 + in.u8() % lwp::kMaxEventSlots);
  c.cache_max_bits = static_cast<uint8_t>(10 + in.u8() % 22);
  c.version = 1;
  if (!lwp::validate(c).ok()) {  // fall back to a profile that is certainly valid
    c = lwp::Capabilities{};
    c.available = c.interrupt = c.instructions_retired = c.branches_retired = c.dcache_misses =
        true;
    c.cache_latency_filter = true;
    c.max_events = 3;
  }
  return c;
}

RetiredInstruction insn_from(Input& in, uint64_t& rip) {
  RetiredInstruction r;
  const uint8_t f = in.u8();
  if (f & 0x80)
    rip = in.u64();
  else
    rip += 1 + (f & 7);
  r.rip = rip;
  r.cpl = (f & 0x40) ? static_cast<uint8_t>(in.u8() % 4) : 3;
  const uint8_t kind = (f >> 3) & 7;
  if (kind >= 1 && kind <= 5) {
    const uint8_t b = in.u8();
    r.branch.kind = static_cast<BranchKind>(kind);
    r.branch.taken = b & 1;
    r.branch.prediction_valid = b & 2;
    r.branch.predicted_correctly = b & 4;
    r.branch.next_rip = (b & 8) ? in.u64() : rip + (b >> 4);
  }
  if (kind >= 6) {
    r.cache_miss_count = static_cast<uint8_t>(kind - 5);  // 1 or 2 (the struct holds at most 2)
    for (int i = 0; i < r.cache_miss_count; ++i) {
      const uint8_t m = in.u8();
      r.cache_misses[i].source = static_cast<DataSource>(in.u8());  // any byte, not only the enum's
      r.cache_misses[i].latency_cycles = (m & 1) ? in.u32() : in.u16();
      r.cache_misses[i].data_address = (m & 2) ? in.u64() : 0x600000 + in.u16();
    }
  }
  return r;
}

std::vector<std::byte> lwpcb_template(Input& in, const lwp::Capabilities& caps) {
  std::vector<std::byte> b(caps.lwpcb_size(), std::byte{0});
  auto put32 = [&](size_t off, uint32_t v) {
    for (int i = 0; i < 4; ++i) b[off + i] = static_cast<std::byte>(v >> (8 * i));
  };
  auto put64 = [&](size_t off, uint64_t v) {
    for (int i = 0; i < 8; ++i) b[off + i] = static_cast<std::byte>(v >> (8 * i));
  };
  const uint32_t records = 1 + in.u8() % 64;
  const uint8_t random_bits = in.u8() % 16;
  put32(lwp::lwpcb::kBufferSize, 32 * records | (uint32_t{random_bits} << 28));
  put64(lwp::lwpcb::kBufferBase, 0x20000 + 32 * (in.u16() % 512) + (in.u8() % 32));
  const uint32_t head = 32 * (in.u8() % records);
  put32(lwp::lwpcb::kBufferHeadOffset, head);
  const uint8_t t = in.u8();
  put32(lwp::lwpcb::kBufferTailOffset, t == 0 ? head : 32 * (t % records));
  put64(lwp::lwpcb::kMissedEvents, in.u8());
  put32(lwp::lwpcb::kThreshold, 32 * in.u8());
  put32(lwp::lwpcb::kFilters, in.u32());
  for (uint32_t i = 0; i < caps.max_events; ++i) {
    const uint8_t s = in.u8();
    const uint32_t id = (s & 0x80) ? (s & 0x3F) : 1 + s % 3;
    const uint32_t interval = (s & 0x40) ? in.u32() & lwp::lwpcb::kIntervalMask : 1 + in.u8() % 16;
    put32(lwp::lwpcb::kEventSlots + 8 * i, id << lwp::lwpcb::kEventIdShift | interval);
    put32(lwp::lwpcb::kEventSlots + 8 * i + 4, (s & 0x20) ? in.u32() : 0);
  }
  return b;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  const lwp::Capabilities caps = caps_from(in);
  lwp::UnitConfig config;
  config.core_id = in.u8();
  config.seed = in.u64();
  Harness h(caps, config);
  lwp::LwpUnit& unit = h.unit;
  uint64_t rip = 0x400000;

  for (int ops = 0; !in.empty() && ops < 4096; ++ops) {
    const size_t vectors_before = h.sink.vectors.size();
    switch (in.u8() % 16) {
      case 0: {
        const uint8_t mode = in.u8();
        uint64_t v;
        if (mode & 1)
          v = in.u64();
        else
          v = lwp::msr0::kEnabled | (in.u8() & 0x0Eu) | (uint64_t{in.u8() & 1u} << 31) |
              (uint64_t{in.u8()} << lwp::msr0::kVectorShift);
        const uint64_t before = unit.lwpmsr0();
        const lwp::MsrResult r = unit.write_msr(lwp::kMsrLwpFeatureEnable, v, in.u8() % 4);
        FUZZ_CHECK(r != lwp::MsrResult::kNotLwpMsr);
        if (r == lwp::MsrResult::kGeneralProtection) FUZZ_CHECK(unit.lwpmsr0() == before);
        if (v & ~kMsr0Defined) FUZZ_CHECK(r == lwp::MsrResult::kGeneralProtection);
        // ... and a value software may write is accepted (DESIGN §4.1: defined bits, features the
        // profile has, INT only with a vector >= 16).
        if (!(v & ~kMsr0Defined) &&
            !(v & 0xEull &
              ~(uint64_t{caps.instructions_retired} << 1 | uint64_t{caps.branches_retired} << 2 |
                uint64_t{caps.dcache_misses} << 3)) &&
            (!(v & lwp::msr0::kInterrupt) ||
             (caps.interrupt && ((v >> lwp::msr0::kVectorShift) & 0xFF) >= 16)))
          FUZZ_CHECK(r == lwp::MsrResult::kOk);
        break;
      }
      case 1: {
        const uint8_t which = in.u8() % 3;
        const uint32_t msr = which == 0   ? lwp::kMsrLwpFeatureEnable
                             : which == 1 ? lwp::kMsrLwpControlBlock
                                          : in.u32();
        uint64_t v = 0;
        const lwp::MsrResult r = unit.read_msr(msr, in.u8() % 4, v);
        FUZZ_CHECK((r == lwp::MsrResult::kNotLwpMsr) == !lwp::LwpUnit::is_lwp_msr(msr));
        if (r == lwp::MsrResult::kOk && msr == lwp::kMsrLwpControlBlock)
          FUZZ_CHECK(v == unit.lwpcb_address());
        break;
      }
      case 2: {
        const uint64_t a = h.address(in);
        const size_t writes_before = h.mem.writes().size();
        const lwp::MsrResult r = unit.write_msr(lwp::kMsrLwpControlBlock, a, in.u8() % 4);
        FUZZ_CHECK(r != lwp::MsrResult::kNotLwpMsr);
        if (r == lwp::MsrResult::kGeneralProtection)
          FUZZ_CHECK(h.mem.writes().size() == writes_before);
        if (r == lwp::MsrResult::kOk) h.admit(a);  // Flags is written even when nothing is active
        break;
      }
      case 3: {
        const uint64_t a = h.address(in);
        h.poke(a, in.bytes(in.u8()));
        break;
      }
      case 4: {
        const uint64_t a = h.address(in);
        h.poke(a, lwpcb_template(in, caps));
        break;
      }
      case 5: {
        const uint64_t a = h.address(in);
        const uint32_t v = in.u32();
        std::vector<std::byte> b(4);
        for (int i = 0; i < 4; ++i) b[i] = static_cast<std::byte>(v >> (8 * i));
        h.poke(a, b);
        break;
      }
      case 6: {
        const int n = 1 + in.u8() % 64;
        for (int i = 0; i < n; ++i) unit.retire(insn_from(in, rip));
        break;
      }
      case 7: unit.enter_user(); break;
      case 8:
        h.saved.push_back(unit.save());
        if (h.saved.size() > 4) h.saved.erase(h.saved.begin());
        break;
      case 9: {
        const uint8_t i = in.u8();
        if (!h.saved.empty()) {
          const size_t writes_before = h.mem.writes().size();
          unit.restore(h.saved[i % h.saved.size()]);
          FUZZ_CHECK(h.mem.writes().size() == writes_before);
        }
        break;
      }
      case 10: unit.restore(lwp::SaveArea{}); break;
      case 11: {
        const lwp::UnitState s = unit.state();
        std::vector<std::byte> bytes = lwp::serialize(s);
        auto d = lwp::deserialize(bytes);
        FUZZ_CHECK(d.ok());
        FUZZ_CHECK(d.value() == s);
        const uint8_t pos = in.u8(), x = in.u8();
        const bool damaged = !bytes.empty() && x != 0;
        if (damaged) {
          bytes[pos % bytes.size()] ^= static_cast<std::byte>(x);
          d = lwp::deserialize(bytes);
        }
        if (auto* st = (d.ok() ? &d.value() : nullptr)) {
          auto again = lwp::deserialize(lwp::serialize(*st));
          FUZZ_CHECK(again.ok());
          FUZZ_CHECK(again.value() == *st);
          const auto err = unit.load_state(*st);
          FUZZ_CHECK(damaged || err.ok());  // the unit's own state is always accepted
          if (err.ok()) FUZZ_CHECK(unit.lwpcb_address() == st->save_area.lwpcb_address);
        }
        break;
      }
      case 12: {
        const std::vector<std::byte> bytes = in.bytes(in.u8());
        auto d = lwp::deserialize(bytes);
        if (auto* st = (d.ok() ? &d.value() : nullptr)) {
          auto again = lwp::deserialize(lwp::serialize(*st));
          FUZZ_CHECK(again.ok());
          FUZZ_CHECK(again.value() == *st);
          const lwp::UnitState before = unit.state();
          if (!unit.load_state(*st).ok()) FUZZ_CHECK(unit.state() == before);  // refused: unchanged
        }
        break;
      }
      case 13: {
        const uint64_t page = kPages[in.u8() % kPageCount];
        switch (in.u8() % 4) {
          case 0:
            h.mem.map(page, kPage, true);
            h.pages.insert(page);
            break;
          case 1:
            h.mem.map(page, kPage, false);
            h.pages.insert(page);
            break;
          case 2:
            h.mem.unmap(page, kPage);
            h.pages.erase(page);
            break;
          case 3: h.mem.set_writable(page, kPage, false); break;
        }
        break;
      }
      case 14: unit.reset(); break;
      case 15: {
        const uint64_t a = unit.lwpcb_address();
        if (a != 0 && h.mapped(a, 24))
          h.mem.poke_u32(a + lwp::lwpcb::kBufferTailOffset,
                         h.mem.peek_u32(a + lwp::lwpcb::kBufferHeadOffset));
        break;
      }
    }
    h.check(vectors_before);
  }
  return 0;
}
