// Randomised property tests of the virtual LWP unit (pmu/lwp/lwp_unit.h; contracts: DESIGN.md
// §4.1–4.2, spec/lwp-proposal-2007.txt §5.3–5.5).
//
// Every test case is one fixed seed. The seed decides the capabilities, the unit's configuration
// and a program: a sequence of operations a guest, its kernel and a VMM could perform on one vCPU's
// LWP unit — WRMSR/RDMSR of LWPMSR0/LWPMSR1 at CPL 0 and 3, enter_user(), bursts of retired
// instructions, a consumer advancing BufferTailOffset, LWPCBs rewritten with random contents,
// pages unmapped/remapped/made read-only, save()/restore(), context switches, state() ->
// serialize -> deserialize -> load_state round trips, snapshots into a second unit, reset().
// Programs are pure data (generated before they run), so a failing one can be shrunk: a failure
// prints the seed and a minimal operation sequence that still fails the same way.
//
// Two profiles:
//  * hostile     — anything goes: garbage MSR values, invalid LWPCBs, LWPCBs rewritten while in
//                  use, pages pulled away mid-run, save areas restored twice ("time travel").
//  * cooperative — software follows the proposal's rules (LWPCB constant while in use, ring
//                  consumed properly, no page changes); stronger checks apply (ring contents).
//
// Invariants checked after every operation (and per retired instruction where noted):
//  [containment]   every write the unit makes lies inside the LWPCB it holds
//                  [addr, addr + 40 + 8*MaxEvents) or inside the buffer [BufferBase & ~31,
//                  + BufferSize) that LWPCB describes (any contents it held while loaded).
//  [head]          BufferHeadOffset in the LWPCB (written by flushes, thresholds, full buffer,
//                  SLWPCB) is < BufferSize and a multiple of 32.
//  [counter-bound] every EventCounter written back is <= interval | (2^Random - 1).
//  [missed]        MissedEvents in memory never decreases while the same LWPCB stays loaded.
//  [stats]         stats() counters never decrease, reset() included; records_stored and
//                  interrupts grow exactly with the observer's records / the sink's vectors.
//  [generation]    generation() changes whenever state() changes.
//  [flush]         SLWPCB of an initialised unit leaves its head in BufferHeadOffset.
//  [overflow]      (cooperative) the head never advances onto the tail; "missed" means full.
//  [ring-content]  (cooperative) the ring between tail and flushed head holds only records.
//  [gp-no-effect]  an MSR access that raises #GP (or is not an LWP MSR) changes nothing.
//  [llwpcb-oracle] LLWPCB is accepted exactly when DESIGN §4.1 / lwp_unit.h say so.
//  [record]        records are stored only by CPL-3 retire(), at most one per instruction, for
//                  that instruction's RIP, with the vCPU's core id and zero reserved bytes, for an
//                  event the processor has and LWPMSR0 enabled when the LWPCB was initialised.
//  [ring-order]    records go to BufferBase + the head the session started with (LWPCB or save
//                  area), +32 per stored record with wrap-around, in place after a missed one;
//                  [flush] compares the flushed head with this model too.
//  [interrupt]     threshold interrupts use LWPMSR0's vector, only while LWPMSR0.INT is set, and
//                  only right after a stored record.
//  [threshold]     (cooperative) exactly one interrupt when a stored record makes head - tail equal
//                  Threshold (INT in LWPMSR0 now and at initialisation), none otherwise; the LWPCB
//                  shows the head whenever the buffer is full or head - tail >= Threshold.
//  [missed]        (cooperative, additionally) MissedEvents grows by exactly the missed records.
//  [msr0-model]    LWPMSR0 (and RDMSR of it) is the last value software wrote successfully; a
//                  valid value is never refused.
//  [snapshot]      a unit rebuilt from state() -> serialize -> deserialize -> load_state over a
//                  copy of guest memory produces the same records, memory and interrupts.
//  [determinism]   the same seed gives byte-identical memory, records, interrupts and stats; a
//                  run that fails an invariant fails this test too (never skipped).
//
// Coverage: every run counts what it exercised (LLWPCB ok / #GP, records stored / missed,
// interrupts, snapshots, ...) and how often each check actually compared something;
// LwpPropertyCoverage asserts floors per generator, so a generator that stops reaching a path, or
// a check that silently stops applying, fails the suite.
//
// Mutation experiments (2026-11-23; each bug injected into pmu/lwp by hand, suite run, reverted):
//  * head advance wraps one slot early (lwp_unit.cc store(): `head_ + 2*32 >= size ? 0`):
//    all 10 cooperative + 11/14 hostile seeds ([ring-order], [overflow], [ring-content],
//    [threshold]), 3/3 determinism, coverage. Before: 10 cooperative only, determinism green.
//  * MissedEvents not incremented on a full buffer (increment_missed_events() drops `now`):
//    10/10 cooperative ([missed] exact), 3/3 determinism. Before: all green.
//  * threshold interrupt skipped when the new head is a multiple of 64: 7/10 cooperative
//    ([threshold]; the other 3 seeds never reach an interrupt), 3/3 determinism. Before: green.
//  * threshold interrupt on head - tail >= Threshold instead of ==: 7/10 cooperative, 2/3
//    determinism ([threshold]). Before: green.
//  * BufferHeadOffset not written when the threshold condition holds: 10/10 cooperative
//    ([threshold] head progress), 3/3 determinism. Before: green.
//  * Random mask one bit too wide ((2 << Random) - 1): 23/24 seeds ([counter-bound]), 3/3
//    determinism. Before: the same seeds, determinism green.
//  * Random ignored (mask 0): LwpRandomProperty. Before: green.
//  * INT vector 16 refused (`<= 16`): 5/14 hostile ([msr0-oracle] #GP on a valid value),
//    LwpSerializeProperty (load_state verdict). Before: green.
//  * load_state refuses counter_count == max_events (`>=`): every seed ([load-state]) and now also
//    LwpSerializeProperty. Before: the seeds only.
//  * events not masked by LWPMSR0 at initialisation: 10/10 cooperative + 10/14 hostile
//    ([record]), 2/3 determinism. Before: 1 hostile seed ([head]).
//  * generator regression (test side: Threshold always 0): LwpPropertyCoverage (interrupt floors)
//    for both generators. Before: green. It also made cooperative seed 7 and hostile seed 34 fail
//    [snapshot]. Seed 7 shrinks to: a unit rebuilt by load_state() re-derives its active events
//    (and Flags.INT) from the LWPMSR0 of its ring-3 re-initialisation, while the original keeps
//    those of its LLWPCB (LLWPCB at CPL 0 with LWPMSR0 = EN|BRE|DME, retire, WRMSR LWPMSR0 adding
//    IRE, snapshot, retire: the clone stores an IRE record, the original does not). Not fixed
//    here (pmu/). Seed 34 shrinks to an LWPCB rewritten while in use (§5.4: unpredictable), whose
//    new contents the clone reads at its re-initialisation: there [snapshot] may be too strict.
//
// Oracle logic that encodes today's rule "a failed ring-buffer store discards the record":
// llwpcb_oracle() (buffer must be user-writable at LLWPCB), stats().store_faults in [stats] and
// digest(), and no #PF hook on the units the harness builds.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "pmu/lwp/architecture.h"
#include "pmu/lwp/capabilities.h"
#include "pmu/lwp/lwp_unit.h"
#include "pmu/lwp/save_area.h"
#include "pmu/retired_instruction.h"
#include "tests/support/fake_guest_memory.h"
#include "tests/support/recording_interrupt_sink.h"

namespace pmu::lwp {
namespace {

using ::pmu::testing::FakeGuestMemory;
using ::pmu::testing::RecordingInterruptSink;

// ----------------------------------------------------------------------------------------------
// Deterministic randomness (own generator: std:: distributions differ between library versions).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed * 0x2545F4914F6CDD1Dull + 0x9E3779B97F4A7C15ull) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }
  uint64_t range(uint64_t lo, uint64_t hi) { return lo + below(hi - lo + 1); }
  bool chance(unsigned percent) { return below(100) < percent; }

 private:
  uint64_t state_;
};

std::string hex(uint64_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

// ----------------------------------------------------------------------------------------------
// The guest address space every program starts with.
constexpr uint64_t kPage = FakeGuestMemory::kPageSize;
constexpr uint64_t kCbArea = 0x10000;  // 3 writable pages holding LWPCBs
constexpr uint64_t kCbAreaPages = 3;
constexpr uint64_t kBufArea = 0x20000;  // 8 writable pages holding ring buffers
constexpr uint64_t kBufAreaPages = 8;
constexpr uint64_t kGuardPage = 0x28000;  // unmapped until a page operation maps it
constexpr uint64_t kRoPage = 0x30000;     // mapped read-only

// LWPCB addresses programs use. Spaced >= 256 bytes apart (an LWPCB is at most 248 bytes), so the
// LWPCBs never overlap each other; 0x10F80 straddles a page boundary.
const std::vector<uint64_t> kCooperativePool = {0x10000, 0x10100, 0x10200,
                                                0x10F80, 0x11100, 0x12000};
const std::vector<uint64_t> kHostilePool = {0x10000,
                                            0x10100,
                                            0x10200,
                                            0x10F80,
                                            0x11100,
                                            0x12000,
                                            0x11208 /* misaligned */,
                                            kRoPage,
                                            0x50000 /* unmapped */,
                                            0xFFFFFFFFFFFFFFF0ull /* wraps */};
const std::vector<uint64_t> kChurnPages = {0x10000, 0x11000,    0x12000, 0x20000, 0x21000,
                                           0x22000, 0x23000,    0x24000, 0x25000, 0x26000,
                                           0x27000, kGuardPage, kRoPage};

constexpr uint64_t kMsr0FeatureBits =
    msr0::kEnabled | msr0::kIre | msr0::kBre | msr0::kDme | msr0::kInterrupt;
// DESIGN §4.1: bits 0-3, 31, 47:40. Written out here rather than taken from the model.
constexpr uint64_t kMsr0DefinedBits = 0xFull | (1ull << 31) | (0xFFull << 40);

// DESIGN §4.1: INT with a vector below 16 is #GP (own oracle).
bool int_vector_below_16(uint64_t msr0_value) {
  return (msr0_value & msr0::kInterrupt) && ((msr0_value >> msr0::kVectorShift) & 0xFF) < 16;
}

uint32_t cb_size(const Capabilities& caps) { return 40 + 8 * uint32_t{caps.max_events}; }

// The LWPMSR0 feature bits a processor with `caps` lets software set (own oracle, DESIGN §4.1).
uint64_t allowed_features(const Capabilities& caps) {
  uint64_t a = 0;
  if (caps.available) a |= msr0::kEnabled;
  if (caps.instructions_retired) a |= msr0::kIre;
  if (caps.branches_retired) a |= msr0::kBre;
  if (caps.dcache_misses) a |= msr0::kDme;
  if (caps.interrupt) a |= msr0::kInterrupt;
  return a;
}

void put_u32(std::vector<std::byte>& b, size_t off, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[off + i] = static_cast<std::byte>(v >> (8 * i));
}
void put_u64(std::vector<std::byte>& b, size_t off, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[off + i] = static_cast<std::byte>(v >> (8 * i));
}
uint32_t get_u32(const std::byte* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// [a, a+alen) and [b, b+blen) intersect (no wrap-around surprises: 128-bit ends).
bool overlaps(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen) {
  using U = unsigned __int128;
  return alen && blen && U{a} < U{b} + blen && U{b} < U{a} + alen;
}
// [a, a+alen) inside [s, s+slen).
bool inside(uint64_t a, uint64_t alen, uint64_t s, uint64_t slen) {
  using U = unsigned __int128;
  return U{a} >= U{s} && U{a} + alen <= U{s} + slen;
}

// ----------------------------------------------------------------------------------------------
// Programs.
enum class OpKind : uint8_t {
  kWrmsr0,          // WRMSR LWPMSR0 = value at cpl
  kRdmsr,           // RDMSR index 0: LWPMSR0, 1: LWPMSR1 (SLWPCB) at cpl
  kLlwpcb,          // WRMSR LWPMSR1 = value (LLWPCB) at cpl
  kOtherMsr,        // WRMSR/RDMSR of a non-LWP MSR (index): must not be claimed
  kEnterUser,       // enter_user()
  kRetire,          // retire() each of insns
  kConsume,         // software advances BufferTailOffset (value = fraction of the filled part)
  kCorruptTail,     // software writes a random BufferTailOffset (value)
  kWriteLwpcb,      // software writes bytes at LWPCB address value (flag: only if not in use)
  kUnmapPage,       // kChurnPages[index]
  kMapPage,         // kChurnPages[index], writable = flag
  kProtectPage,     // kChurnPages[index], writable = flag
  kSave,            // save() into the program's save list
  kRestore,         // restore(save list[index % size])
  kRestoreEmpty,    // restore(SaveArea{})
  kContextSwitch,   // save() the current context, restore another saved one (index) or none
  kStateRoundTrip,  // state() -> serialize -> deserialize -> load_state into the same unit
  kSnapshot,        // state() -> ... -> load_state into a fresh unit over a copy of memory
  kReset,           // reset()
};

struct Op {
  OpKind kind = OpKind::kEnterUser;
  uint8_t cpl = 0;
  uint64_t value = 0;
  uint32_t index = 0;
  bool flag = false;
  std::vector<RetiredInstruction> insns;
  std::vector<std::byte> bytes;
};

struct Program {
  uint64_t seed = 0;
  bool hostile = false;
  Capabilities caps;
  UnitConfig config;
  std::vector<Op> ops;
};

const char* branch_name(BranchKind k) {
  switch (k) {
    case BranchKind::kNone: return "none";
    case BranchKind::kConditional: return "jcc";
    case BranchKind::kDirectJump: return "jmp";
    case BranchKind::kIndirectJump: return "jmp*";
    case BranchKind::kCall: return "call";
    case BranchKind::kReturn: return "ret";
  }
  return "?";
}

std::string describe_insn(const RetiredInstruction& in) {
  std::ostringstream os;
  os << "{rip=" << hex(in.rip) << " cpl=" << int{in.cpl};
  if (in.is_branch())
    os << " " << branch_name(in.branch.kind) << (in.branch.taken ? " taken" : " not-taken")
       << " next=" << hex(in.branch.next_rip) << " pv=" << in.branch.prediction_valid
       << " pc=" << in.branch.predicted_correctly;
  for (int i = 0; i < in.cache_miss_count; ++i)
    os << " miss(addr=" << hex(in.cache_misses[i].data_address)
       << " lat=" << in.cache_misses[i].latency_cycles
       << " src=" << int{static_cast<uint8_t>(in.cache_misses[i].source)} << ")";
  os << "}";
  return os.str();
}

std::string describe_lwpcb(const std::vector<std::byte>& b) {
  std::ostringstream os;
  const uint32_t sw = get_u32(&b[lwpcb::kBufferSize]);
  os << "flags=" << hex(get_u32(&b[0])) << " size=" << (sw & lwpcb::kBufferSizeMask)
     << " random=" << (sw >> lwpcb::kRandomShift) << " base=" << hex(get_u64(&b[8]))
     << " head=" << get_u32(&b[16]) << " tail=" << get_u32(&b[20]) << " missed=" << get_u64(&b[24])
     << " threshold=" << get_u32(&b[32]) << " filters=" << hex(get_u32(&b[36])) << " slots=[";
  for (size_t off = 40; off + 8 <= b.size(); off += 8) {
    const uint32_t w0 = get_u32(&b[off]);
    os << (off == 40 ? "" : " ") << "(id=" << (w0 >> lwpcb::kEventIdShift)
       << " int=" << (w0 & lwpcb::kIntervalMask) << " ctr=" << hex(get_u32(&b[off + 4])) << ")";
  }
  os << "]";
  return os.str();
}

std::string describe(const Op& op) {
  std::ostringstream os;
  switch (op.kind) {
    case OpKind::kWrmsr0: os << "wrmsr LWPMSR0=" << hex(op.value) << " cpl=" << int{op.cpl}; break;
    case OpKind::kRdmsr:
      os << (op.index ? "rdmsr LWPMSR1 (SLWPCB)" : "rdmsr LWPMSR0") << " cpl=" << int{op.cpl};
      break;
    case OpKind::kLlwpcb:
      os << "wrmsr LWPMSR1 (LLWPCB) " << hex(op.value) << " cpl=" << int{op.cpl};
      break;
    case OpKind::kOtherMsr: os << "wrmsr/rdmsr non-LWP MSR " << hex(op.index); break;
    case OpKind::kEnterUser: os << "enter_user()"; break;
    case OpKind::kRetire:
      os << "retire x" << op.insns.size() << ":";
      for (const auto& in : op.insns) os << " " << describe_insn(in);
      break;
    case OpKind::kConsume: os << "consumer advances tail (fraction " << hex(op.value) << ")"; break;
    case OpKind::kCorruptTail: os << "software writes tail=" << hex(op.value); break;
    case OpKind::kWriteLwpcb:
      os << "write LWPCB @" << hex(op.value) << (op.flag ? " (if unused)" : "") << ": "
         << describe_lwpcb(op.bytes);
      break;
    case OpKind::kUnmapPage: os << "unmap page " << hex(kChurnPages[op.index]); break;
    case OpKind::kMapPage:
      os << "map page " << hex(kChurnPages[op.index]) << (op.flag ? " rw" : " ro");
      break;
    case OpKind::kProtectPage:
      os << "set page " << hex(kChurnPages[op.index]) << (op.flag ? " rw" : " ro");
      break;
    case OpKind::kSave: os << "save()"; break;
    case OpKind::kRestore: os << "restore(saved #" << op.index << ")"; break;
    case OpKind::kRestoreEmpty: os << "restore(SaveArea{})"; break;
    case OpKind::kContextSwitch:
      os << "context switch (save; restore choice " << op.index << ")";
      break;
    case OpKind::kStateRoundTrip:
      os << "state() -> serialize -> deserialize -> load_state (same unit)";
      break;
    case OpKind::kSnapshot: os << "snapshot into a fresh unit over a copy of memory"; break;
    case OpKind::kReset: os << "reset()"; break;
  }
  return os.str();
}

std::string describe(const Capabilities& c) {
  std::ostringstream os;
  os << "caps{int=" << c.interrupt << " ire=" << c.instructions_retired
     << " bre=" << c.branches_retired << " dme=" << c.dcache_misses
     << " max_events=" << int{c.max_events} << " cache_max_bits=" << int{c.cache_max_bits}
     << " data_address=" << c.data_address << " clf=" << c.cache_level_filter
     << " latency_filter=" << c.cache_latency_filter << "}";
  return os.str();
}

// ---- generators ------------------------------------------------------------------------------
Capabilities gen_caps(Rng& r) {
  for (int attempt = 0; attempt < 16; ++attempt) {
    Capabilities c;
    c.available = true;
    c.interrupt = r.chance(75);
    c.instructions_retired = r.chance(85);
    c.branches_retired = r.chance(75);
    c.dcache_misses = r.chance(75);
    c.max_events = static_cast<uint8_t>(r.chance(15) ? kMaxEventSlots : r.range(1, 5));
    c.cache_max_bits = static_cast<uint8_t>(r.chance(60) ? 10 : r.range(10, 31));
    c.data_address = r.chance(60);
    c.cache_level_filter = r.chance(60);
    c.cache_latency_filter = r.chance(60);
    if (c.dcache_misses && !c.cache_level_filter && !c.cache_latency_filter)
      c.cache_latency_filter = true;
    c.version = 1;
    if (validate(c).ok()) return c;
  }
  Capabilities full;  // every feature: always a valid description
  full.available = full.interrupt = full.instructions_retired = full.branches_retired = true;
  full.dcache_misses = full.data_address = full.cache_level_filter = full.cache_latency_filter =
      true;
  full.max_events = 3;
  full.cache_max_bits = 10;
  return full;
}

uint64_t gen_valid_msr0(Rng& r, const Capabilities& caps) {
  uint64_t v = msr0::kEnabled;
  for (uint64_t bit : {msr0::kIre, msr0::kBre, msr0::kDme, msr0::kInterrupt})
    if ((allowed_features(caps) & bit) && r.chance(85)) v |= bit;
  if (caps.interrupt)
    v |= ((v & msr0::kInterrupt) ? 16 + r.below(240) : r.below(256)) << msr0::kVectorShift;
  return v;
}

std::vector<std::byte> gen_lwpcb(Rng& r, const Capabilities& caps, bool hostile, bool force_valid) {
  std::vector<std::byte> b(cb_size(caps), std::byte{0});
  static const uint32_t kRecords[] = {1, 2, 3, 4, 5, 6, 8, 12, 16, 32, 64, 128, 256};
  const uint32_t records = kRecords[r.below(std::size(kRecords))];
  uint32_t size = 32 * records;
  uint64_t base = kBufArea + 32 * r.below((kBufAreaPages * kPage - size) / 32 + 1);
  if (r.chance(30)) base |= r.below(32);  // the low 5 bits are ignored
  const uint32_t random_bits = static_cast<uint32_t>(r.chance(50)   ? 0
                                                     : r.chance(70) ? r.range(1, 4)
                                                                    : r.range(5, 15));
  uint32_t head = 32 * static_cast<uint32_t>(r.below(records));
  uint32_t tail = hostile ? 32 * static_cast<uint32_t>(r.below(records)) : head;
  if (hostile && !force_valid && r.chance(15)) {
    switch (r.below(9)) {
      case 0: size = 0; break;
      case 1: size = static_cast<uint32_t>(r.below(1u << 28)); break;  // rarely a multiple of 32
      case 2: base = kGuardPage - 32 * r.below(records); break;        // spills into the guard
      case 3:
        base = kRoPage;
        size = 32 * records > kPage ? kPage : size;
        break;
      case 4: base = r.next(); break;
      case 5: head = static_cast<uint32_t>(r.next()); break;
      case 6: tail = static_cast<uint32_t>(r.below(size + 64)); break;
      case 7: size = 0x0FFFFFE0; break;
      case 8: head = size; break;
    }
  }
  uint32_t threshold = r.chance(30)   ? 0
                       : r.chance(75) ? 32 * static_cast<uint32_t>(r.below(records + 1))
                                      : static_cast<uint32_t>(r.next());
  uint32_t filters = r.chance(50) ? 0 : static_cast<uint32_t>(r.below(256));
  filters |= static_cast<uint32_t>(r.next()) & 0x1F000000u;  // CLF NBC RDC RAM OTH
  if (r.chance(30)) filters |= lwpcb::kFilterNdb;
  if (hostile && r.chance(10)) filters = static_cast<uint32_t>(r.next());

  put_u32(b, lwpcb::kFlags, hostile ? static_cast<uint32_t>(r.next()) : 0);
  put_u32(b, lwpcb::kBufferSize,
          (size & lwpcb::kBufferSizeMask) | (random_bits << lwpcb::kRandomShift));
  put_u64(b, lwpcb::kBufferBase, base);
  put_u32(b, lwpcb::kBufferHeadOffset, head);
  put_u32(b, lwpcb::kBufferTailOffset, tail);
  put_u64(b, lwpcb::kMissedEvents, r.chance(50) ? 0 : r.below(1ull << 40));
  put_u32(b, lwpcb::kThreshold, threshold);
  put_u32(b, lwpcb::kFilters, filters);
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < caps.max_events; ++i) {
    uint32_t id;
    const uint64_t k = r.below(100);
    if (k < 55)
      id = static_cast<uint32_t>(r.range(1, 3));
    else if (k < 70)
      id = 0;
    else if (k < 85 && !ids.empty())
      id = ids[r.below(ids.size())];  // duplicate
    else
      id = static_cast<uint32_t>(r.range(4, 63));
    ids.push_back(id);
    uint32_t interval;
    const uint64_t j = r.below(100);
    if (j < 55)
      interval = static_cast<uint32_t>(r.range(1, 8));
    else if (j < 75)
      interval = static_cast<uint32_t>(r.range(9, 300));
    else if (j < 85)
      interval = 0;
    else if (j < 95)
      interval = static_cast<uint32_t>(r.range(301, 100000));
    else
      interval = static_cast<uint32_t>(r.below(1u << 26));
    uint32_t counter;
    const uint64_t c = r.below(100);
    if (c < 55)
      counter = 0;
    else if (c < 75)
      counter = static_cast<uint32_t>(r.range(1, std::max<uint32_t>(interval, 1)));
    else if (c < 90)
      counter = static_cast<uint32_t>(r.below(1u << 26));
    else
      counter = static_cast<uint32_t>(r.next());  // garbage in the reserved bits too
    uint32_t w0 = (id << lwpcb::kEventIdShift) | interval;
    if (hostile && r.chance(5)) w0 = static_cast<uint32_t>(r.next());
    put_u32(b, lwpcb::kEventSlots + 8 * i, w0);
    put_u32(b, lwpcb::kEventSlots + 8 * i + 4, counter);
  }
  return b;
}

RetiredInstruction gen_insn(Rng& r) {
  RetiredInstruction in;
  const uint64_t k = r.below(100);
  in.rip = k < 60   ? 0x400000 + 4 * r.below(256)
           : k < 95 ? (r.next() & 0xFFFFFFFFFFFFull)
                    : r.next();
  in.cpl = static_cast<uint8_t>(r.chance(88) ? 3 : r.below(3));
  if (r.chance(45)) {
    in.branch.kind = static_cast<BranchKind>(r.range(1, 5));
    in.branch.taken = in.branch.kind == BranchKind::kConditional ? r.chance(50) : !r.chance(5);
    in.branch.next_rip = r.chance(80) ? in.rip + r.below(64) - 32 : r.next();
    in.branch.prediction_valid = r.chance(50);
    in.branch.predicted_correctly = r.chance(70);
  }
  const uint64_t m = r.below(100);
  in.cache_miss_count = m < 55 ? 0 : m < 85 ? 1 : 2;
  static const DataSource kSources[] = {DataSource::kNoValidStatus, DataSource::kLocalL3,
                                        DataSource::kRemoteCache,   DataSource::kDram,
                                        DataSource::kOther,         DataSource::kL2};
  for (int i = 0; i < in.cache_miss_count; ++i) {
    CacheMiss& miss = in.cache_misses[i];
    miss.data_address = r.chance(70) ? 0x600000 + r.below(1u << 20) : r.next();
    const uint64_t l = r.below(100);
    miss.latency_cycles = static_cast<uint32_t>(l < 50   ? r.below(2048)
                                                : l < 80 ? r.below(64)
                                                         : r.next());
    miss.source = kSources[r.below(std::size(kSources))];
  }
  return in;
}

Program gen_program(uint64_t seed, bool hostile, size_t length) {
  Rng r(seed * 2 + (hostile ? 1 : 0));
  Program p;
  p.seed = seed;
  p.hostile = hostile;
  p.caps = gen_caps(r);
  p.config.core_id = static_cast<uint8_t>(r.below(256));
  p.config.seed = r.next();
  const std::vector<uint64_t>& pool = hostile ? kHostilePool : kCooperativePool;
  auto op = [](OpKind k) {
    Op o;
    o.kind = k;
    return o;
  };

  // Prologue: the kernel enables LWP, a program writes a few LWPCBs and loads one.
  {
    Op o = op(OpKind::kWrmsr0);
    o.value = gen_valid_msr0(r, p.caps);
    p.ops.push_back(o);
    for (int i = 0; i < 3; ++i) {
      Op w = op(OpKind::kWriteLwpcb);
      w.value = kCooperativePool[i];
      w.bytes = gen_lwpcb(r, p.caps, hostile, true);
      p.ops.push_back(w);
    }
    Op l = op(OpKind::kLlwpcb);
    l.value = kCooperativePool[0];
    l.cpl = 3;
    p.ops.push_back(l);
  }

  struct Weight {
    OpKind kind;
    unsigned hostile, cooperative;  // per mille
  };
  static const Weight kWeights[] = {
      {OpKind::kRetire, 330, 420},
      {OpKind::kLlwpcb, 80, 60},
      {OpKind::kRdmsr, 70, 70},
      {OpKind::kWrmsr0, 40, 20},
      {OpKind::kOtherMsr, 10, 5},
      {OpKind::kEnterUser, 50, 50},
      {OpKind::kConsume, 120, 180},
      {OpKind::kCorruptTail, 8, 0},
      {OpKind::kWriteLwpcb, 80, 80},
      {OpKind::kUnmapPage, 8, 0},
      {OpKind::kMapPage, 20, 0},
      {OpKind::kProtectPage, 16, 0},
      {OpKind::kSave, 30, 0},
      {OpKind::kRestore, 30, 0},
      {OpKind::kRestoreEmpty, 8, 0},
      {OpKind::kContextSwitch, 30, 50},
      {OpKind::kStateRoundTrip, 20, 20},
      {OpKind::kSnapshot, 3, 3},
      {OpKind::kReset, 3, 3},
  };
  unsigned total = 0;
  for (const auto& w : kWeights) total += hostile ? w.hostile : w.cooperative;

  while (p.ops.size() < length) {
    unsigned pick = static_cast<unsigned>(r.below(total));
    OpKind kind = OpKind::kRetire;
    for (const auto& w : kWeights) {
      const unsigned wt = hostile ? w.hostile : w.cooperative;
      if (pick < wt) {
        kind = w.kind;
        break;
      }
      pick -= wt;
    }
    Op o = op(kind);
    o.cpl = static_cast<uint8_t>(r.chance(50) ? 3 : r.chance(80) ? 0 : r.range(1, 2));
    switch (kind) {
      case OpKind::kWrmsr0: {
        const uint64_t k = r.below(100);
        if (!hostile) {
          o.cpl = 0;
          o.value = k < 90 ? gen_valid_msr0(r, p.caps) : 0;
        } else {
          o.value = k < 75   ? gen_valid_msr0(r, p.caps)
                    : k < 80 ? 0
                    : k < 90 ? (r.next() & kMsr0DefinedBits)
                             : r.next();
        }
        break;
      }
      case OpKind::kRdmsr: o.index = r.chance(75) ? 1 : 0; break;
      case OpKind::kLlwpcb: {
        const uint64_t k = r.below(100);
        if (k < 8)
          o.value = 0;
        else if (hostile && k < 12)
          o.value = r.next();
        else if (hostile && k < 30)
          o.value = pool[r.below(pool.size())];  // incl. the bad ones
        else
          o.value = kCooperativePool[r.below(kCooperativePool.size())];
        break;
      }
      case OpKind::kOtherMsr: {
        static const uint32_t kOther[] = {0,          0x10,       0x1B,       0xC0000080,
                                          0xC0000104, 0xC0000107, 0xC0010000, 0x4B564D00,
                                          0x40000040, 0xFFFFFFFF};
        o.index = kOther[r.below(std::size(kOther))];
        o.value = r.next();
        break;
      }
      case OpKind::kRetire: {
        const size_t n = r.chance(20) ? r.range(1, 3) : r.range(4, 40);
        for (size_t i = 0; i < n; ++i) o.insns.push_back(gen_insn(r));
        break;
      }
      case OpKind::kConsume: o.value = r.chance(30) ? ~0ull : r.next(); break;
      case OpKind::kCorruptTail:
        o.value = r.chance(50) ? r.below(8192) : static_cast<uint32_t>(r.next());
        break;
      case OpKind::kWriteLwpcb:
        o.value = r.chance(80) ? kCooperativePool[r.below(kCooperativePool.size())]
                               : pool[r.below(pool.size())];
        o.flag = !hostile || r.chance(70);
        o.bytes = gen_lwpcb(r, p.caps, hostile, false);
        break;
      case OpKind::kUnmapPage:
      case OpKind::kMapPage:
      case OpKind::kProtectPage:
        o.index = static_cast<uint32_t>(r.below(kChurnPages.size()));
        o.flag = r.chance(60);
        break;
      case OpKind::kRestore:
      case OpKind::kContextSwitch: o.index = static_cast<uint32_t>(r.below(8)); break;
      default: break;
    }
    p.ops.push_back(std::move(o));
  }
  return p;
}

// ----------------------------------------------------------------------------------------------
// Running a program.

// Which LWPCB the unit was last pointed at by an operation the harness understands, and whether
// its contents are still the ones it was accepted with (not rewritten by software, pages not
// replaced). Only then do [head], [counter-bound] and [missed] apply: software that changes a
// constant LWPCB field while in use gets "unpredictable results" (§5.4), not a broken invariant.
struct Session {
  uint64_t addr = 0;
  uint64_t gen = 0;
  bool clean = false;
};

struct Saved {
  SaveArea area;
  Session session;
  bool fresh = true;  // cooperative profile: may be restored (no time travel)
};

struct World {
  World(const Capabilities& c, const UnitConfig& cfg, std::string n)
      : caps(c), config(cfg), name(std::move(n)) {}
  void make_unit() {
    unit = std::make_unique<LwpUnit>(caps, config, mem, sink);
    unit->set_record_observer([this](const StoredRecord& r) { records.push_back(r); });
  }

  const Capabilities caps;
  const UnitConfig config;
  const std::string name;
  FakeGuestMemory mem;
  RecordingInterruptSink sink;
  std::unique_ptr<LwpUnit> unit;
  std::vector<StoredRecord> records;

  std::set<uint64_t> pages;                // mapped pages (the fake maps pages on peek/poke)
  std::map<uint64_t, uint64_t> gen;        // LWPCB address -> contents generation
  std::map<uint64_t, uint64_t> flags_gen;  // LWPCB address -> generation whose Flags the unit wrote
  std::vector<Saved> saved;
  Session session;
  uint64_t epoch = 0;  // bumped whenever an operation repoints the unit

  std::set<std::pair<uint64_t, uint64_t>> allowed;  // [start, +len) the unit may write
  size_t writes_seen = 0;
  size_t writes_compared = 0;  // snapshot comparison
  UnitStats last_stats;
  uint64_t missed_epoch = ~0ull;
  std::optional<uint64_t> last_missed;
  std::vector<uint64_t> ring_key;

  uint64_t msr0_model = 0;  // LWPMSR0 as the successful WRMSRs, reset() and load_state() left it
  uint64_t init_msr0 = 0;   // LWPMSR0 when the unit last completed an initialisation
  // [ring-order] Where the next record must be written, from the LWPCB (and save area) the
  // session started with: base + head, +32 per stored record (wrapping), in place after a missed
  // one. Only for the epoch it was computed in.
  std::optional<uint64_t> next_record;
  uint64_t ring_epoch = ~0ull, ring_base = 0;
  uint32_t ring_size = 0;
};

struct Pre {
  UnitState state;
  uint64_t generation = 0;
  size_t writes = 0, records = 0, vectors = 0;
  uint64_t msr0 = 0;
  Session session;
  bool live = false;
  uint64_t epoch = 0;
};

struct Outcome {
  int result = -1;
  uint64_t value = 0;
  bool operator==(const Outcome&) const = default;
};

struct Failure {
  std::string tag;
  std::string message;
  size_t step = 0;
};

struct Coverage {
  uint64_t llwpcb_ok = 0, llwpcb_gp = 0, snapshots = 0, retired = 0;
  // How often each check of the primary unit actually compared something: a check whose
  // preconditions never hold cannot fail, so the coverage test puts floors on these too.
  uint64_t ring_order_checks = 0;     // [ring-order] records whose address the model predicted
  uint64_t threshold_checks = 0;      // [threshold] records the interrupt oracle judged
  uint64_t threshold_expected = 0;    //   ... of which it expected an interrupt for
  uint64_t head_progress_checks = 0;  // [threshold] BufferHeadOffset shown on threshold/full
  uint64_t missed_exact_checks = 0;   // [missed] exact MissedEvents deltas compared
  uint64_t counter_checks = 0;        // [counter-bound] EventCounters compared with the bound
  uint64_t ring_slots_checked = 0;    // [ring-content] ring slots inspected
  uint64_t overflow_checks = 0;       // [overflow] records compared with the tail
  uint64_t flush_checks = 0;          // [flush] flushed heads compared with the model
  uint64_t clone_steps = 0;           // [snapshot] operations a clone replayed and was compared on
  UnitStats stats;                    // the primary's at the end of the run
};

struct RunResult {
  // A failure of the primary unit ends the run; a snapshot clone that diverges is recorded and
  // dropped, and the primary goes on being checked (so one finding does not hide another).
  std::vector<Failure> failures;
  bool failed() const { return !failures.empty(); }
  bool has(const std::string& tag) const {
    for (const auto& f : failures)
      if (f.tag == tag) return true;
    return false;
  }
  std::vector<uint8_t> digest;
  Coverage coverage;
};

class Runner {
 public:
  explicit Runner(const Program& p) : p_(p) {}

  RunResult run() {
    auto primary = std::make_unique<World>(p_.caps, p_.config, "primary");
    setup(*primary);
    for (step_ = 0; step_ < p_.ops.size() && !stop_; ++step_) {
      const Op& op = p_.ops[step_];
      if (op.kind == OpKind::kSnapshot) {
        if (clone_) full_compare(*primary, *clone_);
        drop_failed_clone();
        if (!stop_) clone_ = snapshot(*primary);
        drop_failed_clone();
        ++result_.coverage.snapshots;
        continue;
      }
      Outcome a, b;
      execute(*primary, op, a);
      if (clone_ && !stop_) {
        execute(*clone_, op, b);
        if (!failed()) {
          ++result_.coverage.clone_steps;
          compare(*primary, *clone_, a, b, step_ % 64 == 0);
        }
        drop_failed_clone();
      }
    }
    if (!stop_ && clone_) full_compare(*primary, *clone_);
    if (!result_.failed()) result_.digest = digest(*primary);
    const UnitStats& s = primary->unit->stats();
    UnitStats& c = result_.coverage.stats;
    c.records_stored += s.records_stored;
    c.records_missed += s.records_missed;
    c.interrupts += s.interrupts;
    c.store_faults += s.store_faults;
    c.init_faults += s.init_faults;
    c.tail_rereads += s.tail_rereads;
    return result_;
  }

 private:
  bool failed() const { return stop_ || clone_failed_; }
  void count(const World& w, uint64_t Coverage::*field) {
    if (w.name == "primary") ++(result_.coverage.*field);
  }
  // The unit finished a (deferred) initialisation: Flags.INT came from the LWPMSR0 of now. This
  // includes the re-initialisation after restore()/load_state(), which today re-derives the
  // active events and Flags.INT from the current LWPMSR0 (see the snapshot note at the top); if
  // the unit starts keeping those of the LLWPCB, track only LLWPCB initialisations here.
  static void note_init(World& w, PendingInit before, bool llwpcb_at_cpl3) {
    if ((before != PendingInit::kNone || llwpcb_at_cpl3) && w.unit->lwpcb_address() != 0 &&
        w.unit->save().pending == PendingInit::kNone)
      w.init_msr0 = w.unit->lwpmsr0();
  }
  void drop_failed_clone() {
    if (clone_failed_) clone_.reset();
    clone_failed_ = false;
  }
  void fail(const World& w, const std::string& tag, const std::string& msg) {
    if (failed()) return;
    if (&w == clone_.get() || w.name == "snapshot clone")
      clone_failed_ = true;
    else
      stop_ = true;
    const std::string what = step_ < p_.ops.size() ? describe(p_.ops[step_]).substr(0, 160)
                                                   : std::string("end of program");
    result_.failures.push_back({tag,
                                "[" + tag + "] " + w.name + " at step " + std::to_string(step_) +
                                    " (" + what + "): " + msg,
                                step_});
  }

  // ---- memory helpers that never map a page by accident ----
  static bool mapped(const World& w, uint64_t a, uint64_t n) {
    if (n == 0) return true;
    if (a + n < a) return false;
    for (uint64_t page = a & ~(kPage - 1); page < a + n; page += kPage) {
      if (!w.pages.count(page)) return false;
      if (page + kPage < page) break;
    }
    return true;
  }
  static std::optional<uint32_t> peek32(World& w, uint64_t a) {
    if (!mapped(w, a, 4)) return std::nullopt;
    return w.mem.peek_u32(a);
  }
  static std::optional<uint64_t> peek64(World& w, uint64_t a) {
    if (!mapped(w, a, 8)) return std::nullopt;
    return w.mem.peek_u64(a);
  }
  static void poke_mapped(World& w, uint64_t a, const std::vector<std::byte>& bytes) {
    for (size_t i = 0; i < bytes.size(); ++i)
      if (mapped(w, a + i, 1)) w.mem.poke(a + i, std::span<const std::byte>(&bytes[i], 1));
  }
  void bump_gen(World& w, uint64_t a, uint64_t n) {
    for (auto& [addr, g] : w.gen)
      if (overlaps(addr, cb_size(w.caps), a, n)) ++g;
  }
  bool clean(const World& w, const Session& s) const {
    if (!s.clean || s.addr == 0) return false;
    auto it = w.gen.find(s.addr);
    return it != w.gen.end() && it->second == s.gen;
  }
  bool live(const World& w) const {
    return w.unit->lwpcb_address() != 0 && w.unit->lwpcb_address() == w.session.addr &&
           clean(w, w.session);
  }
  // `head`: the head the unit starts from (a restored save area's), else the LWPCB's.
  void repoint(World& w, const Session& s, std::optional<uint32_t> head = std::nullopt) {
    w.session = s;
    ++w.epoch;
    if (s.addr) w.gen.emplace(s.addr, 0);
    w.next_record.reset();
    if (!s.addr || !clean(w, s) || !mapped(w, s.addr, 40)) return;
    const uint32_t size = w.mem.peek_u32(s.addr + lwpcb::kBufferSize) & lwpcb::kBufferSizeMask;
    const uint64_t base =
        w.mem.peek_u64(s.addr + lwpcb::kBufferBase) & ~lwpcb::kBufferBaseIgnoredMask;
    const uint32_t h = head ? *head : w.mem.peek_u32(s.addr + lwpcb::kBufferHeadOffset);
    if (size == 0 || size % 32 || h >= size || h % 32) return;  // the unit will refuse it
    w.next_record = base + h;
    w.ring_epoch = w.epoch;
    w.ring_base = base;
    w.ring_size = size;
  }

  void setup(World& w) {
    w.mem.map(kCbArea, kCbAreaPages * kPage, true);
    w.mem.map(kBufArea, kBufAreaPages * kPage, true);
    w.mem.map(kRoPage, kPage, false);
    for (uint64_t i = 0; i < kCbAreaPages; ++i) w.pages.insert(kCbArea + i * kPage);
    for (uint64_t i = 0; i < kBufAreaPages; ++i) w.pages.insert(kBufArea + i * kPage);
    w.pages.insert(kRoPage);
    for (uint64_t a : kHostilePool) w.gen[a] = 0;
    w.make_unit();
    w.last_stats = w.unit->stats();
  }

  // ---- one operation on one world, with all per-operation checks ----
  void execute(World& w, const Op& op, Outcome& out) {
    Pre pre;
    pre.state = w.unit->state();
    pre.generation = w.unit->generation();
    pre.writes = w.mem.writes().size();
    pre.records = w.records.size();
    pre.vectors = w.sink.vectors.size();
    pre.msr0 = w.unit->lwpmsr0();
    pre.session = w.session;
    pre.live = live(w);
    pre.epoch = w.epoch;
    apply(w, op, pre, out);
    note_init(w, pre.state.save_area.pending,
              op.kind == OpKind::kLlwpcb && op.cpl == 3 &&
                  out.result == static_cast<int>(MsrResult::kOk));
    if (!failed()) post_checks(w, op, pre);
  }

  void expect_untouched(World& w, const Pre& pre, const std::string& tag, const std::string& what) {
    if (w.unit->state() != pre.state)
      fail(w, tag, what + " changed state()");
    else if (w.mem.writes().size() != pre.writes)
      fail(w, tag, what + " wrote guest memory at " + hex(w.mem.writes()[pre.writes].address));
    else if (w.records.size() != pre.records)
      fail(w, tag, what + " stored a record");
    else if (w.sink.vectors.size() != pre.vectors)
      fail(w, tag, what + " raised an interrupt");
  }

  bool llwpcb_oracle(World& w, uint64_t a) {
    if (a == 0) return true;  // "Address 0 is always accepted (disables)"
    if (!(w.msr0_model & msr0::kEnabled)) return false;
    if (a % 16 != 0) return false;
    if (!w.mem.user_writable(a, cb_size(w.caps))) return false;
    const uint32_t size = *peek32(w, a + lwpcb::kBufferSize) & lwpcb::kBufferSizeMask;
    const uint64_t base = *peek64(w, a + lwpcb::kBufferBase) & ~lwpcb::kBufferBaseIgnoredMask;
    const uint32_t head = *peek32(w, a + lwpcb::kBufferHeadOffset);
    const uint32_t tail = *peek32(w, a + lwpcb::kBufferTailOffset);
    if (size == 0 || size % 32 != 0) return false;
    // DESIGN §4.1: the buffer's pages may be absent or read-only (stores raise a #PF trap); only
    // its range must be canonical, within one half (lwp_unit.h).
    const uint64_t last = base + (size - 1);
    auto canonical = [](uint64_t x) {
      return static_cast<uint64_t>(static_cast<int64_t>(x << 16) >> 16) == x;
    };
    if (last < base || !canonical(base) || !canonical(last) || (base >> 63) != (last >> 63))
      return false;
    if (head >= size || head % 32 != 0 || tail >= size || tail % 32 != 0) return false;
    return true;
  }

  void apply(World& w, const Op& op, const Pre& pre, Outcome& out) {
    LwpUnit& u = *w.unit;
    switch (op.kind) {
      case OpKind::kWrmsr0: {
        const MsrResult r = u.write_msr(kMsrLwpFeatureEnable, op.value, op.cpl);
        out.result = static_cast<int>(r);
        if (r == MsrResult::kNotLwpMsr) return fail(w, "msr", "LWPMSR0 not claimed");
        const bool valid = !(op.value & ~kMsr0DefinedBits) &&
                           !(op.value & kMsr0FeatureBits & ~allowed_features(w.caps)) &&
                           !int_vector_below_16(op.value);
        if (r == MsrResult::kGeneralProtection) {
          if (valid) return fail(w, "msr0-oracle", "#GP on a valid LWPMSR0 value " + hex(op.value));
          return expect_untouched(w, pre, "gp-no-effect", "#GP WRMSR LWPMSR0");
        }
        w.msr0_model = op.value;
        if (op.value & ~kMsr0DefinedBits)
          return fail(w, "msr0-oracle",
                      "accepted undefined bits " + hex(op.value & ~kMsr0DefinedBits));
        if (op.value & kMsr0FeatureBits & ~allowed_features(w.caps))
          return fail(w, "msr0-oracle", "accepted features the processor lacks: " + hex(op.value));
        if (int_vector_below_16(op.value))
          return fail(w, "msr0-oracle", "accepted INT with a vector below 16: " + hex(op.value));
        if (u.lwpmsr0() != op.value)
          return fail(w, "msr0-oracle",
                      "LWPMSR0 reads " + hex(u.lwpmsr0()) + " after writing " + hex(op.value));
        if (!(op.value & msr0::kEnabled) && u.lwpcb_address() != 0)
          return fail(w, "msr0-oracle",
                      "clearing EN left LWP pointed at " + hex(u.lwpcb_address()));
        if (!(op.value & msr0::kEnabled) && w.mem.writes().size() != pre.writes)
          return fail(w, "msr0-oracle", "clearing EN touched memory");
        return;
      }
      case OpKind::kRdmsr: {
        uint64_t v = 0xDEADBEEF;
        const uint32_t msr = op.index ? kMsrLwpControlBlock : kMsrLwpFeatureEnable;
        const MsrResult r = u.read_msr(msr, op.cpl, v);
        out.result = static_cast<int>(r);
        out.value = r == MsrResult::kOk ? v : 0;
        if (r == MsrResult::kNotLwpMsr) return fail(w, "msr", "LWP MSR not claimed");
        if (r == MsrResult::kGeneralProtection)
          return expect_untouched(w, pre, "gp-no-effect", "#GP RDMSR");
        if (op.index == 0 && v != w.msr0_model)
          return fail(w, "rdmsr",
                      "RDMSR LWPMSR0 = " + hex(v) + ", last value written " + hex(w.msr0_model));
        if (op.index == 1 && v != u.lwpcb_address())
          return fail(w, "rdmsr",
                      "SLWPCB returned " + hex(v) + ", pointer is " + hex(u.lwpcb_address()));
        // The unit may turn itself off (bad LWPCB at initialisation, no events), never point
        // elsewhere.
        if (op.index == 1 && v != 0 && v != w.session.addr)
          return fail(
              w, "rdmsr",
              "SLWPCB returned " + hex(v) + ", the last LWPCB loaded is " + hex(w.session.addr));
        // [flush] SLWPCB of an initialised unit writes BufferHeadOffset (lwp_unit.h, §5.5.3).
        if (op.index == 1 && v != 0 && pre.live &&
            pre.state.save_area.pending == PendingInit::kNone &&
            w.mem.user_writable(v + lwpcb::kBufferHeadOffset, 4)) {
          const uint32_t mem_head = w.mem.peek_u32(v + lwpcb::kBufferHeadOffset);
          if (mem_head != u.state().save_area.head_offset)
            return fail(w, "flush",
                        "after SLWPCB the LWPCB says head " + std::to_string(mem_head) +
                            ", the unit's head is " +
                            std::to_string(u.state().save_area.head_offset));
          // ... and that head is where the records went (the harness's model, not the unit's).
          if (w.next_record && w.ring_epoch == w.epoch && live(w)) {
            count(w, &Coverage::flush_checks);
            if (mem_head != *w.next_record - w.ring_base)
              return fail(w, "flush",
                          "after SLWPCB the LWPCB says head " + std::to_string(mem_head) +
                              ", the records stored so far put it at " +
                              std::to_string(*w.next_record - w.ring_base));
          }
        }
        return;
      }
      case OpKind::kLlwpcb: {
        const bool expect_ok = llwpcb_oracle(w, op.value);
        const MsrResult r = u.write_msr(kMsrLwpControlBlock, op.value, op.cpl);
        out.result = static_cast<int>(r);
        if (&w != clone_.get())
          ++(r == MsrResult::kOk ? result_.coverage.llwpcb_ok : result_.coverage.llwpcb_gp);
        if (r == MsrResult::kNotLwpMsr) return fail(w, "msr", "LWPMSR1 not claimed");
        if ((r == MsrResult::kOk) != expect_ok)
          return fail(w, "llwpcb-oracle",
                      std::string(r == MsrResult::kOk ? "accepted" : "#GP on") + " LWPCB " +
                          hex(op.value) + " (LWPMSR0 " + hex(u.lwpmsr0()) + "), expected " +
                          (expect_ok ? "acceptance" : "#GP") +
                          (mapped(w, op.value, cb_size(w.caps))
                               ? ": " + describe_lwpcb(w.mem.peek(op.value, cb_size(w.caps)))
                               : ""));
        if (r == MsrResult::kGeneralProtection)
          return expect_untouched(w, pre, "gp-no-effect", "#GP LLWPCB");
        if (u.lwpcb_address() != op.value && u.lwpcb_address() != 0)
          return fail(w, "llwpcb",
                      "pointer " + hex(u.lwpcb_address()) + " after LLWPCB " + hex(op.value));
        if (op.cpl != 3 && u.lwpcb_address() != op.value)
          return fail(w, "llwpcb",
                      "LLWPCB at CPL " + std::to_string(op.cpl) + " did not just load the pointer");
        admit(w, op.value);  // Flags may be written even if no event ends up active
        Session s;
        // LLWPCB validates the new LWPCB, then flushes the old state into the old LWPCB. When both
        // are the same address and software rewrote it meanwhile, the flush puts the old
        // session's head and counters into the new contents: not a clean start.
        const bool stale_flush = pre.state.save_area.lwpcb_address == op.value && !pre.live;
        if (op.value)
          s = Session{op.value, w.gen.count(op.value) ? w.gen[op.value] : 0, !stale_flush};
        repoint(w, s);
        for (Saved& sv : w.saved)
          if (sv.area.lwpcb_address == op.value) sv.fresh = false;
        return;
      }
      case OpKind::kOtherMsr: {
        uint64_t v = 0;
        const MsrResult r1 = u.write_msr(op.index, op.value, 0);
        const MsrResult r2 = u.read_msr(op.index, 0, v);
        out.result = static_cast<int>(r1) * 16 + static_cast<int>(r2);
        if (r1 != MsrResult::kNotLwpMsr || r2 != MsrResult::kNotLwpMsr)
          return fail(w, "msr", "claimed non-LWP MSR " + hex(op.index));
        return expect_untouched(w, pre, "gp-no-effect", "non-LWP MSR access");
      }
      case OpKind::kEnterUser:
        u.enter_user();
        if (u.state().save_area.pending != PendingInit::kNone)
          return fail(w, "enter-user", "initialisation still pending after enter_user()");
        if (w.records.size() != pre.records)
          return fail(w, "record", "enter_user() stored a record");
        if (w.sink.vectors.size() != pre.vectors)
          return fail(w, "interrupt", "enter_user() raised an interrupt");
        return;
      case OpKind::kRetire:
        for (const RetiredInstruction& in : op.insns) {
          if (&w != clone_.get()) ++result_.coverage.retired;
          retire_one(w, in);
          if (failed()) return;
        }
        return;
      case OpKind::kConsume: {
        if (!live(w)) return;
        const uint64_t a = w.session.addr;
        if (!mapped(w, a, 24)) return;
        const uint32_t size = w.mem.peek_u32(a + lwpcb::kBufferSize) & lwpcb::kBufferSizeMask;
        const uint32_t head = w.mem.peek_u32(a + lwpcb::kBufferHeadOffset);
        uint32_t tail = w.mem.peek_u32(a + lwpcb::kBufferTailOffset);
        if (size == 0 || size % 32 || head >= size || head % 32) return;
        if (tail >= size || tail % 32) tail = head;
        const uint64_t filled = ((uint64_t{head} + size - tail) % size) / 32;
        const uint64_t k =
            static_cast<uint64_t>((static_cast<unsigned __int128>(op.value) * (filled + 1)) >> 64);
        const uint32_t new_tail = static_cast<uint32_t>((tail + 32 * k) % size);
        w.mem.poke_u32(a + lwpcb::kBufferTailOffset, new_tail);
        out.value = new_tail;
        return;
      }
      case OpKind::kCorruptTail: {
        const uint64_t a = u.lwpcb_address();
        if (a && mapped(w, a + lwpcb::kBufferTailOffset, 4))
          w.mem.poke_u32(a + lwpcb::kBufferTailOffset, static_cast<uint32_t>(op.value));
        return;
      }
      case OpKind::kWriteLwpcb: {
        if (op.flag) {
          if (u.lwpcb_address() == op.value) return;
          for (const Saved& sv : w.saved)
            if (sv.area.lwpcb_address == op.value && (sv.fresh || p_.hostile)) return;
        }
        poke_mapped(w, op.value, op.bytes);
        bump_gen(w, op.value, op.bytes.size());
        out.result = 1;
        return;
      }
      case OpKind::kUnmapPage: {
        const uint64_t page = kChurnPages[op.index];
        if (!w.pages.count(page)) return;
        w.mem.unmap(page, kPage);
        w.pages.erase(page);
        bump_gen(w, page, kPage);
        return;
      }
      case OpKind::kMapPage: {
        const uint64_t page = kChurnPages[op.index];
        const bool fresh = !w.pages.count(page);
        w.mem.map(page, kPage, op.flag);
        w.pages.insert(page);
        if (fresh) bump_gen(w, page, kPage);
        return;
      }
      case OpKind::kProtectPage: w.mem.set_writable(kChurnPages[op.index], kPage, op.flag); return;
      case OpKind::kSave: {
        Saved sv{u.save(), w.session, true};
        sv.session.clean = live(w) || (u.lwpcb_address() == w.session.addr && clean(w, w.session));
        expect_untouched(w, pre, "save", "save()");
        for (Saved& old : w.saved)
          if (old.area.lwpcb_address == sv.area.lwpcb_address) old.fresh = false;
        w.saved.push_back(sv);
        if (w.saved.size() > 6) w.saved.erase(w.saved.begin());
        return;
      }
      case OpKind::kRestore: {
        if (w.saved.empty()) return;
        const Saved sv = w.saved[op.index % w.saved.size()];
        restore(w, sv, pre);
        return;
      }
      case OpKind::kRestoreEmpty: {
        restore(w, Saved{}, pre);
        if (u.lwpcb_address() != 0) fail(w, "restore", "restore(SaveArea{}) left LWP on");
        return;
      }
      case OpKind::kContextSwitch: {
        Saved out_ctx{u.save(), w.session, true};
        out_ctx.session.clean = u.lwpcb_address() == w.session.addr && clean(w, w.session);
        std::vector<size_t> candidates;
        for (size_t i = 0; i < w.saved.size(); ++i)
          if (p_.hostile ||
              (w.saved[i].fresh && w.saved[i].area.lwpcb_address != u.lwpcb_address()))
            candidates.push_back(i);
        Saved in_ctx;
        const size_t choice = op.index % (candidates.size() + 1);
        if (choice < candidates.size()) {
          in_ctx = w.saved[candidates[choice]];
          w.saved.erase(w.saved.begin() + static_cast<long>(candidates[choice]));
        }
        restore(w, in_ctx, pre);
        if (out_ctx.area.lwpcb_address != 0) {
          for (Saved& old : w.saved)
            if (old.area.lwpcb_address == out_ctx.area.lwpcb_address) old.fresh = false;
          w.saved.push_back(out_ctx);
          if (w.saved.size() > 6) w.saved.erase(w.saved.begin());
        }
        return;
      }
      case OpKind::kStateRoundTrip: {
        const UnitState s = u.state();
        const std::vector<std::byte> bytes = serialize(s);
        auto d = deserialize(bytes);
        if (!d.ok())
          return fail(w, "serialize", "deserialize(serialize(state())) failed: " + d.reason());
        const UnitState& back = d.value();
        if (back != s) return fail(w, "serialize", "deserialize(serialize(s)) != s");
        if (serialize(back) != bytes) return fail(w, "serialize", "serialize is not deterministic");
        if (const pmu::Status err = u.load_state(back); !err.ok())
          return fail(w, "load-state", "load_state(own state) refused: " + err.reason());
        if (u.lwpcb_address() != s.save_area.lwpcb_address || u.lwpmsr0() != s.lwpmsr0)
          return fail(w, "load-state", "load_state did not load pointer/LWPMSR0");
        if (w.mem.writes().size() != pre.writes)
          return fail(w, "load-state", "load_state touched memory");
        return;
      }
      case OpKind::kSnapshot: return;  // handled by run()
      case OpKind::kReset:
        u.reset();
        if (u.lwpmsr0() != 0 || u.lwpcb_address() != 0)
          return fail(
              w, "reset",
              "reset() left LWPMSR0 " + hex(u.lwpmsr0()) + " / pointer " + hex(u.lwpcb_address()));
        if (w.mem.writes().size() != pre.writes) return fail(w, "reset", "reset() touched memory");
        w.msr0_model = 0;
        repoint(w, Session{});
        return;
    }
  }

  void restore(World& w, const Saved& sv, const Pre& pre) {
    w.unit->restore(sv.area);
    if (w.unit->lwpcb_address() != sv.area.lwpcb_address &&
        !(w.unit->lwpcb_address() == 0 && !(w.unit->lwpmsr0() & msr0::kEnabled)))
      return fail(w, "restore",
                  "pointer " + hex(w.unit->lwpcb_address()) + " after restoring " +
                      hex(sv.area.lwpcb_address));
    if (w.mem.writes().size() != pre.writes) return fail(w, "restore", "restore() touched memory");
    Session s;
    if (sv.area.lwpcb_address)
      s = Session{sv.area.lwpcb_address, sv.session.gen,
                  sv.session.clean && sv.session.addr == sv.area.lwpcb_address};
    // A save taken before the LLWPCB initialised continues that LLWPCB (head from the LWPCB);
    // otherwise the saved head is the unit's (lwp_unit.h restore()).
    repoint(w, s,
            sv.area.pending == PendingInit::kLlwpcb ? std::nullopt
                                                    : std::optional<uint32_t>(sv.area.head_offset));
    for (Saved& other : w.saved)
      if (other.area.lwpcb_address == sv.area.lwpcb_address) other.fresh = false;
  }

  void retire_one(World& w, const RetiredInstruction& in) {
    LwpUnit& u = *w.unit;
    const size_t recs = w.records.size(), vecs = w.sink.vectors.size(),
                 writes = w.mem.writes().size();
    std::optional<UnitState> before;
    if (in.cpl != 3) before = u.state();
    const PendingInit pending_before = u.save().pending;
    u.retire(in);
    note_init(w, pending_before, false);
    const size_t new_recs = w.records.size() - recs;
    if (in.cpl != 3) {
      if (u.state() != *before)
        return fail(w, "record",
                    "a CPL-" + std::to_string(in.cpl) + " instruction changed state()");
      if (w.mem.writes().size() != writes)
        return fail(w, "record", "a CPL-" + std::to_string(in.cpl) + " instruction wrote memory");
    }
    if (new_recs > (in.cpl == 3 ? 1u : 0u))
      return fail(w, "record", std::to_string(new_recs) + " records for " + describe_insn(in));
    for (size_t i = recs; i < w.records.size(); ++i) {
      const StoredRecord& r = w.records[i];
      const std::byte* b = r.bytes.data();
      const uint8_t id = static_cast<uint8_t>(b[0]);
      std::string bad;
      if (id < 1 || id > 3) bad = "event id " + std::to_string(id);
      // An event counts only if the processor has it and LWPMSR0 enabled it when the LWPCB was
      // initialised (§5.3).
      else if (!(allowed_features(w.caps) & (uint64_t{1} << id)) || !((w.init_msr0 >> id) & 1))
        bad = "record for event " + std::to_string(id) +
              ", not enabled (LWPMSR0 at initialisation " + hex(w.init_msr0) + ")";
      else if (static_cast<uint8_t>(b[1]) != w.config.core_id)
        bad = "core id " + std::to_string(int(b[1]));
      else if (get_u64(b + 8) != in.rip)
        bad = "rip " + hex(get_u64(b + 8));
      else if (get_u64(b + 24) != 0)
        bad = "reserved bytes 24..31 not zero";
      else if (id == 2 && !in.is_branch())
        bad = "branch record for a non-branch";
      else if (id == 2 && get_u64(b + 16) != in.branch.next_rip)
        bad = "branch record next rip";
      else if (id == 3 && in.cache_miss_count == 0)
        bad = "DCache record without a miss";
      else if (r.address % 32 != 0)
        bad = "record address " + hex(r.address) + " not 32-byte aligned";
      else if (!mapped(w, r.address, 32) ||
               w.mem.peek(r.address, 32) != std::vector<std::byte>(r.bytes.begin(), r.bytes.end()))
        bad = "observer saw a record that is not in memory at " + hex(r.address);
      if (!bad.empty()) return fail(w, "record", bad + " for " + describe_insn(in));
      // [ring-order] records go to base + head of the LWPCB (or save area) the session started
      // with, one slot further per stored record, in place after a missed one.
      if (w.next_record && w.ring_epoch == w.epoch) {
        if (live(w)) {
          count(w, &Coverage::ring_order_checks);
          if (r.address != *w.next_record)
            return fail(w, "ring-order",
                        "record " + std::string(r.missed ? "(missed) " : "") + "stored at " +
                            hex(r.address) + ", the ring's head is at " + hex(*w.next_record) +
                            " (base " + hex(w.ring_base) + ", size " + std::to_string(w.ring_size) +
                            ")");
        }
        if (!r.missed)
          w.next_record =
              r.address + 32 == w.ring_base + w.ring_size ? w.ring_base : r.address + 32;
      }
      // [overflow] cooperative software never moves the tail past the head, so the unit's view
      // of "full" must match memory: the head never advances onto the tail (§3 Store), and a
      // record counted as missed was stored only when the buffer really was full.
      if (!p_.hostile && live(w) && mapped(w, w.session.addr, 40)) {
        const uint64_t a = w.session.addr;
        const uint32_t size = w.mem.peek_u32(a + lwpcb::kBufferSize) & lwpcb::kBufferSizeMask;
        const uint64_t base =
            w.mem.peek_u64(a + lwpcb::kBufferBase) & ~lwpcb::kBufferBaseIgnoredMask;
        const uint32_t tail = w.mem.peek_u32(a + lwpcb::kBufferTailOffset);
        if (size != 0 && r.address >= base && r.address - base < size) {
          count(w, &Coverage::overflow_checks);
          const uint32_t next = static_cast<uint32_t>((r.address - base + 32) % size);
          if (!r.missed && next == tail)
            return fail(w, "overflow",
                        "record at offset " + std::to_string(r.address - base) +
                            " advanced the head onto the tail " + std::to_string(tail));
          if (r.missed && next != tail)
            return fail(w, "overflow",
                        "record at offset " + std::to_string(r.address - base) +
                            " counted as missed with tail " + std::to_string(tail));
        }
      }
    }
    if (new_recs == 0 && w.sink.vectors.size() != vecs)
      return fail(w, "interrupt",
                  "threshold interrupt without a stored record for " + describe_insn(in));
    // [threshold] (cooperative: the tail only moves towards the head, so the unit's cached tail is
    // never behind memory's in a way that matters). After a record that advanced the head, the
    // interrupt comes exactly when head - tail == Threshold (DESIGN §4.2, equality), Threshold !=
    // 0, LWPMSR0.INT now and at initialisation (Flags.INT). The LWPCB shows the head whenever the
    // buffer is full or head - tail >= Threshold (§5.5.3).
    if (!p_.hostile && new_recs == 1 && live(w) && mapped(w, w.session.addr, 40)) {
      const StoredRecord& r = w.records.back();
      const uint64_t a = w.session.addr;
      const uint32_t size = w.mem.peek_u32(a + lwpcb::kBufferSize) & lwpcb::kBufferSizeMask;
      const uint64_t base = w.mem.peek_u64(a + lwpcb::kBufferBase) & ~lwpcb::kBufferBaseIgnoredMask;
      const uint32_t tail = w.mem.peek_u32(a + lwpcb::kBufferTailOffset);
      const uint32_t threshold = w.mem.peek_u32(a + lwpcb::kThreshold);
      if (size != 0 && size % 32 == 0 && tail < size && tail % 32 == 0 && r.address >= base &&
          r.address - base < size) {
        count(w, &Coverage::threshold_checks);
        const uint32_t off = static_cast<uint32_t>(r.address - base);
        const uint32_t head = r.missed ? off : (off + 32) % size;
        const uint32_t used = (head + size - tail) % size;
        const bool expect = !r.missed && threshold != 0 && used == threshold && w.caps.interrupt &&
                            (w.init_msr0 & msr0::kInterrupt) && (u.lwpmsr0() & msr0::kInterrupt);
        if (expect) count(w, &Coverage::threshold_expected);
        const size_t got = w.sink.vectors.size() - vecs;
        if (got != (expect ? 1u : 0u))
          return fail(w, "threshold",
                      std::to_string(got) + " interrupts, expected " + std::to_string(expect) +
                          ": head " + std::to_string(head) + ", tail " + std::to_string(tail) +
                          ", threshold " + std::to_string(threshold) +
                          (r.missed ? " (missed)" : "") + ", LWPMSR0 " + hex(u.lwpmsr0()) +
                          " (at initialisation " + hex(w.init_msr0) + ")");
        if (r.missed || (threshold != 0 && used >= threshold)) {
          count(w, &Coverage::head_progress_checks);
          const uint32_t shown = w.mem.peek_u32(a + lwpcb::kBufferHeadOffset);
          if (shown != head)
            return fail(w, "threshold",
                        std::string(r.missed ? "buffer full" : "threshold reached") +
                            " but the LWPCB shows head " + std::to_string(shown) + ", not " +
                            std::to_string(head));
        }
      }
    }
    for (size_t i = vecs; i < w.sink.vectors.size(); ++i) {
      const uint64_t m = u.lwpmsr0();
      if (!(m & msr0::kInterrupt) || !w.caps.interrupt)
        return fail(w, "interrupt",
                    "threshold interrupt while LWPMSR0.INT is clear (" + hex(m) + ")");
      if (w.sink.vectors[i] != static_cast<uint8_t>(m >> msr0::kVectorShift))
        return fail(w, "interrupt",
                    "vector " + std::to_string(w.sink.vectors[i]) + ", LWPMSR0 " + hex(m));
    }
    if (w.sink.nmis != 0) return fail(w, "interrupt", "NMI delivered");
  }

  // ---- invariants after every operation ----
  void admit(World& w) { admit(w, w.unit->lwpcb_address()); }
  void admit(World& w, uint64_t a) {
    if (a == 0) return;
    w.allowed.insert({a, cb_size(w.caps)});
    auto sw = peek32(w, a + lwpcb::kBufferSize);
    auto base = peek64(w, a + lwpcb::kBufferBase);
    if (!sw || !base) return;
    const uint32_t size = *sw & lwpcb::kBufferSizeMask;
    if (size != 0 && size % 32 == 0)
      w.allowed.insert({*base & ~lwpcb::kBufferBaseIgnoredMask, size});
  }

  void check_counter(World& w, uint64_t a, uint32_t slot) {
    auto fg = w.flags_gen.find(a);
    if (fg == w.flags_gen.end() || fg->second != w.gen[a]) return;  // Flags not the unit's
    if (!mapped(w, a, cb_size(w.caps))) return;
    const uint32_t flags = w.mem.peek_u32(a + lwpcb::kFlags);
    const uint32_t w0 = w.mem.peek_u32(a + lwpcb::kEventSlots + 8 * slot);
    const uint32_t id = w0 >> lwpcb::kEventIdShift, interval = w0 & lwpcb::kIntervalMask;
    if (id < 1 || id > 3 || interval == 0 || !(flags & (1u << id))) return;
    for (uint32_t j = 0; j < slot; ++j)
      if ((w.mem.peek_u32(a + lwpcb::kEventSlots + 8 * j) >> lwpcb::kEventIdShift) == id) return;
    const uint32_t random = w.mem.peek_u32(a + lwpcb::kBufferSize) >> lwpcb::kRandomShift;
    const uint32_t bound = interval | ((1u << random) - 1u);
    const uint32_t counter =
        w.mem.peek_u32(a + lwpcb::kEventSlots + 8 * slot + 4) & lwpcb::kIntervalMask;
    count(w, &Coverage::counter_checks);
    if (counter > bound)
      fail(w, "counter-bound",
           "EventCounter" + std::to_string(slot) + " of LWPCB " + hex(a) + " = " +
               std::to_string(counter) + " > interval " + std::to_string(interval) + " | (2^" +
               std::to_string(random) + " - 1)");
  }

  void check_head(World& w, uint64_t a) {
    auto sw = peek32(w, a + lwpcb::kBufferSize);
    auto head = peek32(w, a + lwpcb::kBufferHeadOffset);
    if (!sw || !head) return;
    const uint32_t size = *sw & lwpcb::kBufferSizeMask;
    if (*head >= size || *head % 32 != 0)
      fail(w, "head",
           "BufferHeadOffset of LWPCB " + hex(a) + " = " + std::to_string(*head) +
               " with BufferSize " + std::to_string(size));
  }

  void post_checks(World& w, const Op& /*op*/, const Pre& pre) {
    LwpUnit& u = *w.unit;
    // [containment] + which LWPCB fields the unit wrote.
    admit(w);
    const auto& writes = w.mem.writes();
    const bool post_live = live(w);
    for (size_t i = w.writes_seen; i < writes.size() && !failed(); ++i) {
      const auto& wr = writes[i];
      bool ok = false;
      for (const auto& [s, len] : w.allowed)
        if (inside(wr.address, wr.length, s, len)) {
          ok = true;
          break;
        }
      if (!ok) {
        std::string regions;
        for (const auto& [s, len] : w.allowed)
          regions += " [" + hex(s) + ",+" + std::to_string(len) + ")";
        return fail(w, "containment",
                    "write [" + hex(wr.address) + ",+" + std::to_string(wr.length) +
                        ") outside every LWPCB/buffer the unit held:" + regions);
      }
      for (auto& [a, g] : w.gen)
        if (overlaps(wr.address, wr.length, a + lwpcb::kFlags, 4)) w.flags_gen[a] = g;
    }
    for (size_t i = w.writes_seen; i < writes.size() && !failed(); ++i) {
      for (const Session* s : {&pre.session, static_cast<const Session*>(&w.session)}) {
        const bool ok = (s == &pre.session) ? pre.live : post_live;
        if (!ok) continue;
        for (uint32_t slot = 0; slot < w.caps.max_events && !failed(); ++slot)
          if (overlaps(writes[i].address, writes[i].length,
                       s->addr + lwpcb::kEventSlots + 8 * slot + 4, 4))
            check_counter(w, s->addr, slot);
      }
    }
    w.writes_seen = writes.size();
    if (failed()) return;

    // [head]: the LWPCB held before and after this operation (a flush writes the old one).
    if (pre.live && clean(w, pre.session)) check_head(w, pre.session.addr);
    if (!failed() && post_live) check_head(w, w.session.addr);
    if (failed()) return;

    // [missed]
    if (pre.epoch != w.epoch && pre.live && clean(w, pre.session) && w.last_missed &&
        w.missed_epoch == pre.epoch) {
      auto m = peek64(w, pre.session.addr + lwpcb::kMissedEvents);
      if (m && *m < *w.last_missed)
        return fail(w, "missed",
                    "MissedEvents of LWPCB " + hex(pre.session.addr) + " went from " +
                        std::to_string(*w.last_missed) + " to " + std::to_string(*m));
    }
    if (w.missed_epoch != w.epoch || !post_live) {
      w.missed_epoch = w.epoch;
      w.last_missed.reset();
    }
    if (post_live) {
      auto m = peek64(w, w.session.addr + lwpcb::kMissedEvents);
      if (m && w.last_missed && *m < *w.last_missed)
        return fail(w, "missed",
                    "MissedEvents of LWPCB " + hex(w.session.addr) + " went from " +
                        std::to_string(*w.last_missed) + " to " + std::to_string(*m));
      // Cooperative software never takes the LWPCB's pages away, so every miss is counted at
      // once: MissedEvents grows by exactly the number of records stored as missed.
      if (!p_.hostile && m && w.last_missed) {
        count(w, &Coverage::missed_exact_checks);
        uint64_t missed = 0;
        for (size_t i = pre.records; i < w.records.size(); ++i) missed += w.records[i].missed;
        if (*m - *w.last_missed != missed)
          return fail(w, "missed",
                      "MissedEvents of LWPCB " + hex(w.session.addr) + " went from " +
                          std::to_string(*w.last_missed) + " to " + std::to_string(*m) + ", " +
                          std::to_string(missed) + " records were missed");
      }
      if (m)
        w.last_missed = *m;
      else
        w.last_missed.reset();
    }

    // [stats] — cumulative over the unit's life, reset() included (lwp_unit.h).
    const UnitStats& st = u.stats();
    const UnitStats& old = w.last_stats;
    const std::pair<const char*, std::pair<uint64_t, uint64_t>> fields[] = {
        {"records_stored", {old.records_stored, st.records_stored}},
        {"records_missed", {old.records_missed, st.records_missed}},
        {"interrupts", {old.interrupts, st.interrupts}},
        {"store_faults", {old.store_faults, st.store_faults}},
        {"init_faults", {old.init_faults, st.init_faults}},
        {"tail_rereads", {old.tail_rereads, st.tail_rereads}},
    };
    for (const auto& [name, v] : fields)
      if (v.second < v.first)
        return fail(w, "stats",
                    std::string(name) + " went from " + std::to_string(v.first) + " to " +
                        std::to_string(v.second));
    if (st.interrupts - old.interrupts != w.sink.vectors.size() - pre.vectors)
      return fail(w, "stats",
                  "stats().interrupts grew by " + std::to_string(st.interrupts - old.interrupts) +
                      ", the sink got " + std::to_string(w.sink.vectors.size() - pre.vectors));
    size_t advanced = 0;
    for (size_t i = pre.records; i < w.records.size(); ++i) advanced += !w.records[i].missed;
    if (st.records_stored - old.records_stored != advanced)
      return fail(
          w, "stats",
          "records_stored grew by " + std::to_string(st.records_stored - old.records_stored) +
              ", the observer saw " + std::to_string(advanced) + " records that advanced the head");
    const size_t missed_seen = (w.records.size() - pre.records) - advanced;
    if (st.records_missed - old.records_missed != missed_seen)
      return fail(w, "stats",
                  "records_missed grew by " +
                      std::to_string(st.records_missed - old.records_missed) +
                      ", the observer saw " + std::to_string(missed_seen) + " missed records");
    w.last_stats = st;
    if (u.lwpmsr0() != w.msr0_model)
      return fail(w, "msr0-model",
                  "LWPMSR0 is " + hex(u.lwpmsr0()) + ", software last wrote " + hex(w.msr0_model));

    // [generation]
    const UnitState now = u.state();
    if (now != pre.state && u.generation() == pre.generation)
      return fail(w, now.save_area != pre.state.save_area ? "generation" : "generation-msr0",
                  "state() changed but generation() stayed " + std::to_string(pre.generation));

    // Cooperative software: the ring between tail and (flushed) head holds only valid records.
    if (!p_.hostile && post_live) check_ring(w);
  }

  void check_ring(World& w) {
    const uint64_t a = w.session.addr;
    if (!mapped(w, a, 40)) return;
    const uint32_t size = w.mem.peek_u32(a + lwpcb::kBufferSize) & lwpcb::kBufferSizeMask;
    const uint64_t base = w.mem.peek_u64(a + lwpcb::kBufferBase) & ~lwpcb::kBufferBaseIgnoredMask;
    const uint32_t head = w.mem.peek_u32(a + lwpcb::kBufferHeadOffset);
    const uint32_t tail = w.mem.peek_u32(a + lwpcb::kBufferTailOffset);
    if (size == 0 || size % 32 || head >= size || tail >= size || head % 32 || tail % 32) return;
    std::vector<uint64_t> key = {a, head, tail, w.unit->stats().records_stored};
    if (key == w.ring_key) return;
    w.ring_key = key;
    if (!mapped(w, base, size)) return;
    for (uint32_t off = tail; off != head; off = (off + 32) % size) {
      count(w, &Coverage::ring_slots_checked);
      const std::vector<std::byte> rec = w.mem.peek(base + off, 32);
      const uint8_t id = static_cast<uint8_t>(rec[0]);
      if (id < 1 || id > 3 || static_cast<uint8_t>(rec[1]) != w.config.core_id ||
          get_u64(&rec[24]) != 0)
        return fail(w, "ring-content",
                    "record slot at offset " + std::to_string(off) + " of LWPCB " + hex(a) +
                        " (tail " + std::to_string(tail) + ", head " + std::to_string(head) +
                        ") is not a record: id " + std::to_string(id));
    }
  }

  // ---- snapshots ----
  std::unique_ptr<World> snapshot(World& p) {
    const UnitState s = p.unit->state();
    const std::vector<std::byte> bytes = serialize(s);
    auto d = deserialize(bytes);
    if (!d.ok()) {
      fail(p, "serialize", "deserialize(serialize(state())) failed: " + d.reason());
      return nullptr;
    }
    if (d.value() != s) {
      fail(p, "serialize", "deserialize(serialize(s)) != s");
      return nullptr;
    }
    auto c = std::make_unique<World>(p.caps, p.config, "snapshot clone");
    c->mem = p.mem;
    c->pages = p.pages;
    c->gen = p.gen;
    c->flags_gen = p.flags_gen;
    c->saved = p.saved;
    c->session = p.session;
    c->epoch = p.epoch;
    c->allowed = p.allowed;
    c->writes_seen = c->writes_compared = p.mem.writes().size();
    p.writes_compared = p.mem.writes().size();
    c->missed_epoch = p.missed_epoch;
    c->last_missed = p.last_missed;
    c->msr0_model = p.msr0_model;
    c->init_msr0 = p.init_msr0;
    c->next_record = p.next_record;
    c->ring_epoch = p.ring_epoch;
    c->ring_base = p.ring_base;
    c->ring_size = p.ring_size;
    c->make_unit();
    if (const pmu::Status err = c->unit->load_state(d.value()); !err.ok()) {
      fail(p, "snapshot", "fresh unit refused the state: " + err.reason());
      return nullptr;
    }
    if (c->unit->lwpcb_address() != p.unit->lwpcb_address() ||
        c->unit->lwpmsr0() != p.unit->lwpmsr0()) {
      fail(*c, "snapshot", "load_state did not load pointer/LWPMSR0");
      return nullptr;
    }
    c->last_stats = c->unit->stats();
    clone_records_ = p.records.size();
    clone_vectors_ = p.sink.vectors.size();
    return c;
  }

  void compare(World& p, World& c, const Outcome& a, const Outcome& b, bool full) {
    auto diverged = [&](const std::string& what) {
      fail(c, "snapshot", "diverged from the original unit: " + what);
    };
    if (!(a == b))
      return diverged("operation result " + std::to_string(a.result) + "/" + hex(a.value) + " vs " +
                      std::to_string(b.result) + "/" + hex(b.value));
    if (p.records.size() - clone_records_ != c.records.size())
      return diverged(std::to_string(p.records.size() - clone_records_) + " records vs " +
                      std::to_string(c.records.size()));
    for (size_t i = 0; i < c.records.size(); ++i) {
      const StoredRecord& x = p.records[clone_records_ + i];
      const StoredRecord& y = c.records[i];
      if (x.bytes != y.bytes || x.address != y.address || x.missed != y.missed)
        return diverged("record #" + std::to_string(i) + " at " + hex(x.address) + " vs " +
                        hex(y.address));
    }
    if (std::vector<uint8_t>(p.sink.vectors.begin() + static_cast<long>(clone_vectors_),
                             p.sink.vectors.end()) != c.sink.vectors)
      return diverged(std::to_string(p.sink.vectors.size() - clone_vectors_) + " interrupts vs " +
                      std::to_string(c.sink.vectors.size()));
    if (p.unit->lwpcb_address() != c.unit->lwpcb_address() ||
        p.unit->lwpmsr0() != c.unit->lwpmsr0())
      return diverged("pointer/LWPMSR0 " + hex(p.unit->lwpcb_address()) + " vs " +
                      hex(c.unit->lwpcb_address()));
    const UnitState sp = p.unit->state(), sc = c.unit->state();
    if (sp.save_area.pending == PendingInit::kNone && sc.save_area.pending == PendingInit::kNone &&
        sp != sc)
      return diverged("state(): head " + std::to_string(sp.save_area.head_offset) + " vs " +
                      std::to_string(sc.save_area.head_offset) + ", missed_pending " +
                      std::to_string(sp.save_area.missed_pending) + " vs " +
                      std::to_string(sc.save_area.missed_pending) + ", prng " +
                      hex(sp.save_area.prng_state) + " vs " + hex(sc.save_area.prng_state));
    for (World* w : {&p, &c}) {
      for (size_t i = w->writes_compared; i < w->mem.writes().size(); ++i) {
        const auto& wr = w->mem.writes()[i];
        if (!mapped(p, wr.address, wr.length) || !mapped(c, wr.address, wr.length)) continue;
        if (p.mem.peek(wr.address, wr.length) != c.mem.peek(wr.address, wr.length))
          return diverged("memory [" + hex(wr.address) + ",+" + std::to_string(wr.length) +
                          ") differs");
      }
      w->writes_compared = w->mem.writes().size();
    }
    if (full) full_compare(p, c);
  }

  void full_compare(World& p, World& c) {
    if (p.pages != c.pages) return fail(c, "snapshot", "mapped pages differ");
    for (uint64_t page : p.pages) {
      const auto x = p.mem.peek(page, kPage), y = c.mem.peek(page, kPage);
      if (x != y) {
        size_t i = 0;
        while (x[i] == y[i]) ++i;
        return fail(c, "snapshot",
                    "diverged from the original unit: memory at " + hex(page + i) + " differs");
      }
    }
  }

  std::vector<uint8_t> digest(World& w) {
    std::vector<uint8_t> d;
    auto add = [&](uint64_t v) {
      for (int i = 0; i < 8; ++i) d.push_back(static_cast<uint8_t>(v >> (8 * i)));
    };
    for (uint64_t page : w.pages) {
      add(page);
      for (std::byte b : w.mem.peek(page, kPage)) d.push_back(static_cast<uint8_t>(b));
    }
    for (uint8_t v : w.sink.vectors) d.push_back(v);
    add(w.records.size());
    for (const auto& r : w.records) {
      add(r.address);
      for (std::byte b : r.bytes) d.push_back(static_cast<uint8_t>(b));
    }
    const UnitStats& s = w.unit->stats();
    for (uint64_t v : {s.records_stored, s.records_missed, s.interrupts, s.store_faults,
                       s.init_faults, s.tail_rereads, w.unit->generation(), w.mem.failed_writes()})
      add(v);
    for (std::byte b : serialize(w.unit->state())) d.push_back(static_cast<uint8_t>(b));
    return d;
  }

  const Program& p_;
  size_t step_ = 0;
  RunResult result_;
  bool stop_ = false, clone_failed_ = false;
  std::unique_ptr<World> clone_;
  size_t clone_records_ = 0, clone_vectors_ = 0;
};

RunResult run_program(const Program& p) { return Runner(p).run(); }

// Shrinks a failing program to a short one that fails with the same tag (time-boxed).
Program shrink(Program p, const std::string& tag, size_t failing_step, int seconds) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::seconds(seconds);
  p.ops.resize(std::min(p.ops.size(), failing_step + 1));
  auto still_fails = [&](const Program& q) { return run_program(q).has(tag); };
  for (size_t chunk = std::max<size_t>(p.ops.size() / 2, 1);; chunk /= 2) {
    for (size_t i = 0; i < p.ops.size() && Clock::now() < deadline;) {
      Program q = p;
      q.ops.erase(q.ops.begin() + static_cast<long>(i),
                  q.ops.begin() + static_cast<long>(std::min(i + chunk, q.ops.size())));
      if (still_fails(q))
        p = std::move(q);
      else
        i += chunk;
    }
    if (chunk == 1 || Clock::now() >= deadline) break;
  }
  for (size_t i = 0; i < p.ops.size() && Clock::now() < deadline; ++i) {
    if (p.ops[i].kind != OpKind::kRetire) continue;
    for (size_t j = 0;
         j < p.ops[i].insns.size() && p.ops[i].insns.size() > 1 && Clock::now() < deadline;) {
      Program q = p;
      q.ops[i].insns.erase(q.ops[i].insns.begin() + static_cast<long>(j));
      if (still_fails(q))
        p = std::move(q);
      else
        ++j;
    }
  }
  return p;
}

// One report per distinct invariant that failed: the first message, then a shrunk program.
std::string report(const Program& p, const RunResult& r) {
  std::ostringstream os;
  os << "seed " << p.seed << (p.hostile ? " (hostile)" : " (cooperative)") << ", "
     << describe(p.caps) << ", core_id " << int{p.config.core_id} << ", prng seed "
     << hex(p.config.seed);
  std::set<std::string> seen;
  for (const Failure& f : r.failures) {
    if (!seen.insert(f.tag).second) continue;
    os << "\n" << f.message;
    // LWP_PROPERTY_SHRINK_SECONDS (default 10; 0 = report unshrunk): mutation runs fail many seeds.
    const char* env = std::getenv("LWP_PROPERTY_SHRINK_SECONDS");
    if (env && std::atoi(env) <= 0) {
      os << "\n  (not shrunk: LWP_PROPERTY_SHRINK_SECONDS=" << env << ")";
      continue;
    }
    const Program small = shrink(p, f.tag, f.step, env ? std::atoi(env) : 10);
    const RunResult rs = run_program(small);
    for (const Failure& g : rs.failures)
      if (g.tag == f.tag) {
        os << "\n  shrunk to " << small.ops.size() << " operations, failing with: " << g.message;
        break;
      }
    for (size_t i = 0; i < small.ops.size(); ++i)
      os << "\n    " << i << ": " << describe(small.ops[i]);
  }
  return os.str();
}

// ----------------------------------------------------------------------------------------------
// Test cases.
constexpr size_t kProgramLength = 2500;

constexpr uint64_t kHostileSeeds[] = {1,  2,  3,  5,   8,   13,       21,
                                      34, 55, 89, 144, 233, 0xC0FFEE, 0xDEADBEEF};
constexpr uint64_t kCooperativeSeeds[] = {1, 2, 3, 4, 7, 11, 42, 1009, 65537, 0xFEEDFACE};
constexpr uint64_t kDeterminismSeeds[] = {17, 4242, 0xABCDEF};

// One run per (seed, profile) per process: the invariant tests and the coverage test share it.
const RunResult& run_profile(uint64_t seed, bool hostile) {
  static std::map<std::pair<uint64_t, bool>, RunResult> cache;
  auto it = cache.find({seed, hostile});
  if (it == cache.end())
    it = cache
             .emplace(std::pair{seed, hostile},
                      run_program(gen_program(seed, hostile, kProgramLength)))
             .first;
  return it->second;
}

std::string describe(const Coverage& c) {
  std::ostringstream os;
  os << c.retired << " instructions, LLWPCB " << c.llwpcb_ok << " ok / " << c.llwpcb_gp
     << " #GP, records " << c.stats.records_stored << " stored / " << c.stats.records_missed
     << " missed, " << c.stats.interrupts << " interrupts, " << c.stats.store_faults
     << " store faults, " << c.stats.init_faults << " init faults, " << c.stats.tail_rereads
     << " tail rereads, " << c.snapshots << " snapshots; checks evaluated: ring-order "
     << c.ring_order_checks << ", threshold " << c.threshold_checks << " (" << c.threshold_expected
     << " expecting an interrupt), head-progress " << c.head_progress_checks << ", missed-exact "
     << c.missed_exact_checks << ", counter-bound " << c.counter_checks << ", ring slots "
     << c.ring_slots_checked << ", overflow " << c.overflow_checks << ", flush " << c.flush_checks
     << ", clone steps " << c.clone_steps;
  return os.str();
}

class LwpHostileProperty : public ::testing::TestWithParam<uint64_t> {};
class LwpCooperativeProperty : public ::testing::TestWithParam<uint64_t> {};
class LwpDeterminismProperty : public ::testing::TestWithParam<uint64_t> {};

void run_and_check(uint64_t seed, bool hostile) {
  const Program p = gen_program(seed, hostile, kProgramLength);
  SCOPED_TRACE("seed " + std::to_string(p.seed) + (p.hostile ? " hostile" : " cooperative") + " " +
               describe(p.caps));
  const RunResult& r = run_profile(seed, hostile);
  std::cout << "[coverage] seed " << p.seed << (p.hostile ? " hostile" : " cooperative") << ": "
            << p.ops.size() << " ops, " << describe(r.coverage) << "\n";
  if (r.failed()) ADD_FAILURE() << report(p, r);
}

TEST_P(LwpHostileProperty, InvariantsHoldOnRandomPrograms) {
  run_and_check(GetParam(), /*hostile=*/true);
}

TEST_P(LwpCooperativeProperty, InvariantsHoldOnRandomPrograms) {
  run_and_check(GetParam(), /*hostile=*/false);
}

// Two independent runs of one seed. A failed run is a failure of this test, reported with the
// seed, the failing step and operation, and a shrunk program: never skipped.
TEST_P(LwpDeterminismProperty, SameSeedGivesByteIdenticalRuns) {
  for (bool hostile : {false, true}) {
    const Program p = gen_program(GetParam(), hostile, kProgramLength);
    SCOPED_TRACE("seed " + std::to_string(p.seed) + (hostile ? " hostile" : " cooperative"));
    const RunResult a = run_program(p);
    ASSERT_FALSE(a.failed()) << "first run failed: " << report(p, a);
    const RunResult b = run_program(gen_program(GetParam(), hostile, kProgramLength));
    ASSERT_FALSE(b.failed()) << "second run failed (the first passed): " << report(p, b);
    ASSERT_FALSE(a.digest.empty());
    EXPECT_TRUE(a.digest == b.digest) << "two runs of the same program differ (digest sizes "
                                      << a.digest.size() << ", " << b.digest.size() << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, LwpHostileProperty, ::testing::ValuesIn(kHostileSeeds));
INSTANTIATE_TEST_SUITE_P(Seeds, LwpCooperativeProperty, ::testing::ValuesIn(kCooperativeSeeds));
INSTANTIATE_TEST_SUITE_P(Seeds, LwpDeterminismProperty, ::testing::ValuesIn(kDeterminismSeeds));

// The generators must keep exercising every path the invariants watch: a generator change that
// stops storing records, filling buffers, raising threshold interrupts, loading valid LWPCBs or
// taking snapshots — or that leaves a check with nothing to compare — fails here, not silently.
// Floors are about half of what the seed sets gave when they were set (2026-11-23; measured sum
// over the seeds / smallest per-seed value in the comments). store_faults has no floor: a failed
// ring-buffer store is about to become a #PF trap (DESIGN §4.1).
using CoverageItems = std::vector<std::pair<std::string, uint64_t>>;
CoverageItems items(const Coverage& c) {
  return {{"instructions retired", c.retired},
          {"LLWPCB accepted", c.llwpcb_ok},
          {"LLWPCB #GP", c.llwpcb_gp},
          {"records stored", c.stats.records_stored},
          {"records missed", c.stats.records_missed},
          {"threshold interrupts", c.stats.interrupts},
          {"init faults", c.stats.init_faults},
          {"tail rereads", c.stats.tail_rereads},
          {"snapshots", c.snapshots},
          {"[ring-order] checks", c.ring_order_checks},
          {"[threshold] checks", c.threshold_checks},
          {"[threshold] interrupts expected", c.threshold_expected},
          {"[threshold] head-progress checks", c.head_progress_checks},
          {"[missed] exact checks", c.missed_exact_checks},
          {"[counter-bound] checks", c.counter_checks},
          {"[ring-content] slots checked", c.ring_slots_checked},
          {"[overflow] checks", c.overflow_checks},
          {"[flush] checks", c.flush_checks},
          {"[snapshot] clone steps compared", c.clone_steps}};
}
struct Floor {
  uint64_t total;     // summed over the profile's seeds
  uint64_t per_seed;  // every seed
};

void expect_coverage(bool hostile, std::span<const uint64_t> seeds,
                     const std::map<std::string, Floor>& floors) {
  std::map<std::string, uint64_t> total;
  for (uint64_t seed : seeds) {
    const RunResult& r = run_profile(seed, hostile);
    const std::string run = "seed " + std::to_string(seed) +
                            (hostile ? " hostile" : " cooperative") +
                            (r.failed() ? " (the run failed: see its invariant test)" : "");
    for (const auto& [name, value] : items(r.coverage)) {
      total[name] += value;
      auto f = floors.find(name);
      if (f != floors.end()) {
        EXPECT_GE(value, f->second.per_seed) << run << ": " << name << " below the per-seed floor";
      }
    }
  }
  for (const auto& [name, floor] : floors) {
    ASSERT_TRUE(total.count(name)) << "no coverage item " << name;
    EXPECT_GE(total[name], floor.total)
        << (hostile ? "hostile" : "cooperative") << " generator: " << name
        << " summed over the seeds below the floor";
  }
}

TEST(LwpPropertyCoverage, CooperativeGeneratorExercisesEveryPath) {
  expect_coverage(false, kCooperativeSeeds,
                  {
                      {"instructions retired", {150000, 15000}},          // 194820 / 18552
                      {"LLWPCB accepted", {800, 40}},                     // 1221 / 88
                      {"LLWPCB #GP", {150, 5}},                           // 311 / 19
                      {"records stored", {2000, 50}},                     // 4135 / 170
                      {"records missed", {2500, 20}},                     // 5003 / 99
                      {"threshold interrupts", {30, 0}},                  // 71 / 0
                      {"init faults", {10, 0}},                           // 34 / 1
                      {"tail rereads", {2500, 30}},                       // 5730 / 108
                      {"snapshots", {30, 1}},                             // 65 / 3
                      {"[ring-order] checks", {4500, 100}},               // 9138 / 301
                      {"[threshold] checks", {4500, 100}},                // 9138 / 301
                      {"[threshold] interrupts expected", {30, 0}},       // 71 / 0
                      {"[threshold] head-progress checks", {2500, 30}},   // 5551 / 106
                      {"[missed] exact checks", {4000, 100}},             // 8088 / 395
                      {"[counter-bound] checks", {1000, 20}},             // 2310 / 75
                      {"[ring-content] slots checked", {4000, 100}},      // 8502 / 330
                      {"[overflow] checks", {4500, 100}},                 // 9138 / 301
                      {"[flush] checks", {200, 5}},                       // 442 / 23
                      {"[snapshot] clone steps compared", {10000, 500}},  // 22487 / 1810
                  });
}

// The [threshold], [missed]-exact, [ring-content] and [overflow] checks are cooperative-only
// (hostile software moves tails and rewrites LWPCBs), so they have no hostile floors. The hostile
// LLWPCB and init-fault numbers will move when buffers need not be writable at LLWPCB.
TEST(LwpPropertyCoverage, HostileGeneratorExercisesEveryPath) {
  expect_coverage(true, kHostileSeeds,
                  {
                      {"instructions retired", {150000, 10000}},          // 217590 / 14551
                      {"LLWPCB accepted", {350, 10}},                     // 690 / 22
                      {"LLWPCB #GP", {1100, 60}},                         // 2248 / 141
                      {"records stored", {500, 0}},                       // 1215 / 0
                      {"records missed", {1000, 0}},                      // 2215 / 0
                      {"threshold interrupts", {5, 0}},                   // 16 / 0
                      {"init faults", {40, 0}},                           // 219 / 2
                      {"tail rereads", {1000, 0}},                        // 2505 / 18
                      {"snapshots", {50, 1}},                             // 108 / 4
                      {"[ring-order] checks", {1500, 10}},                // 3061 / 28
                      {"[counter-bound] checks", {400, 0}},               // 848 / 3
                      {"[flush] checks", {60, 0}},                        // 163 / 0
                      {"[snapshot] clone steps compared", {12000, 100}},  // 28804 / 488
                  });
}

// LWPCB.Random (DESIGN §4.2): a counter loaded from the interval keeps the interval's bits above
// the low Random bits and gets those from the PRNG. The programs above only bound counters from
// above, so a unit that ignored Random would pass them: here, over many PRNG seeds, the low bits
// must take many values and the high bits none but the interval's.
TEST(LwpRandomProperty, ReloadRandomisesExactlyTheLowRandomBits) {
  Capabilities caps;
  caps.available = caps.instructions_retired = true;
  caps.max_events = 1;
  constexpr uint64_t kCb = 0x10000, kBuf = 0x20000;
  constexpr uint32_t kInterval = 0x1234500;  // low 8 bits clear
  // Distinct low-bit patterns over 64 seeds (measured: R=1 -> 2, R=4 -> 16, R=7 -> 53).
  const std::pair<uint32_t, size_t> kCases[] = {{1, 2}, {4, 12}, {7, 30}};
  for (const auto& [random, min_distinct] : kCases) {
    const uint32_t mask = (1u << random) - 1;
    std::set<uint32_t> low;
    for (uint64_t seed = 1; seed <= 64; ++seed) {
      FakeGuestMemory mem;
      RecordingInterruptSink sink;
      mem.map(kCb, kPage, true);
      mem.map(kBuf, kPage, true);
      std::vector<std::byte> cb(cb_size(caps), std::byte{0});
      put_u32(cb, lwpcb::kBufferSize, 32 * 4 | (random << lwpcb::kRandomShift));
      put_u64(cb, lwpcb::kBufferBase, kBuf);
      put_u32(cb, lwpcb::kEventSlots,
              (uint32_t{kEventInstructionsRetired} << lwpcb::kEventIdShift) | kInterval);
      mem.poke(kCb, cb);
      LwpUnit unit(caps, UnitConfig{0, seed * 0x9E3779B97F4A7C15ull}, mem, sink);
      uint64_t v = 0;
      ASSERT_EQ(unit.write_msr(kMsrLwpFeatureEnable, msr0::kEnabled | msr0::kIre, 0),
                MsrResult::kOk);
      ASSERT_EQ(unit.write_msr(kMsrLwpControlBlock, kCb, 3), MsrResult::kOk);
      ASSERT_EQ(unit.read_msr(kMsrLwpControlBlock, 3, v),
                MsrResult::kOk);  // SLWPCB flushes the counter
      ASSERT_EQ(v, kCb);
      const uint32_t counter = mem.peek_u32(kCb + lwpcb::kEventSlots + 4) & lwpcb::kIntervalMask;
      EXPECT_EQ(counter & ~mask, kInterval & ~mask)
          << "Random " << random << ", seed " << seed << ": counter " << hex(counter)
          << " changed bits above Random";
      low.insert(counter & mask);
    }
    std::cout << "[coverage] Random " << random << ": " << low.size()
              << " distinct low-bit patterns\n";
    EXPECT_GE(low.size(), min_distinct) << "Random " << random << ": only " << low.size()
                                        << " distinct low-bit patterns over 64 PRNG seeds";
  }
}

// Own oracle for load_state() (lwp_unit.h): LWPMSR0 must be one WRMSR could have produced and the
// save area must not have more slots than the processor.
bool load_state_acceptable(const Capabilities& caps, const UnitState& s) {
  return !(s.lwpmsr0 & ~kMsr0DefinedBits) &&
         !(s.lwpmsr0 & kMsr0FeatureBits & ~allowed_features(caps)) &&
         !int_vector_below_16(s.lwpmsr0) && s.save_area.counter_count <= caps.max_events;
}

// An accepted load_state() loaded exactly what it was given (lwp_unit.h restore(): nothing is read
// from the LWPCB before ring 3; a save taken before an LLWPCB initialised continues that LLWPCB).
void expect_loaded(const LwpUnit& unit, const UnitState& s, int iter) {
  const SaveArea now = unit.save();
  EXPECT_EQ(unit.lwpmsr0(), s.lwpmsr0) << "iteration " << iter;
  EXPECT_EQ(unit.lwpcb_address(), s.save_area.lwpcb_address) << "iteration " << iter;
  EXPECT_EQ(now.prng_state, s.save_area.prng_state) << "iteration " << iter;
  if (s.save_area.lwpcb_address == 0) return;
  EXPECT_EQ(now.head_offset, s.save_area.head_offset) << "iteration " << iter;
  EXPECT_EQ(now.missed_pending, s.save_area.missed_pending) << "iteration " << iter;
  EXPECT_EQ(now.pending, s.save_area.pending == PendingInit::kLlwpcb ? PendingInit::kLlwpcb
                                                                     : PendingInit::kRestore)
      << "iteration " << iter;
  for (uint32_t i = 0; i < s.save_area.counter_count; ++i)
    EXPECT_EQ(now.counters[i], s.save_area.counters[i]) << "iteration " << iter << " slot " << i;
}

// Serialized save areas: real and synthetic states round-trip; damaged bytes never crash
// deserialize(), and whatever it accepts is canonical (re-serialises to an equal state);
// load_state() either accepts or refuses without changing anything, and refuses LWPMSR0 bits the
// processor does not have.
TEST(LwpSerializeProperty, RoundTripsAndSurvivesDamagedBytes) {
  // [0] generated states accepted, [1] refused, [2] damaged states accepted, [3] refused,
  // [4] damaged bytes deserialize() rejected.
  uint64_t seen[5] = {};
  for (uint64_t seed : {3ull, 77ull, 31337ull}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng r(seed);
    const Capabilities caps = gen_caps(r);
    FakeGuestMemory mem;
    RecordingInterruptSink sink;
    LwpUnit unit(caps, UnitConfig{1, seed}, mem, sink);
    for (int iter = 0; iter < 400; ++iter) {
      UnitState s;
      s.lwpmsr0 = r.chance(70) ? gen_valid_msr0(r, caps) : r.next() & kMsr0DefinedBits;
      s.save_area.lwpcb_address =
          r.chance(20) ? 0 : (r.chance(70) ? 0x10000 + 16 * r.below(512) : r.next());
      s.save_area.head_offset =
          r.chance(70) ? 32 * static_cast<uint32_t>(r.below(256)) : static_cast<uint32_t>(r.next());
      s.save_area.counter_count =
          static_cast<uint8_t>(r.chance(70) ? caps.max_events : r.below(kMaxEventSlots + 1));
      for (uint32_t i = 0; i < s.save_area.counter_count; ++i)
        s.save_area.counters[i] = static_cast<uint32_t>(r.below(1u << 26));
      s.save_area.missed_pending = r.chance(30);
      s.save_area.pending = static_cast<PendingInit>(r.below(3));
      s.save_area.prng_state = r.next();
      const std::vector<std::byte> bytes = serialize(s);
      auto d = deserialize(bytes);
      ASSERT_TRUE(d.ok()) << "iteration " << iter << ": " << d.reason();
      ASSERT_TRUE(d.value() == s) << "iteration " << iter;
      {
        auto err = unit.load_state(s);
        EXPECT_EQ(err.ok(), load_state_acceptable(caps, s))
            << "iteration " << iter << ": load_state of LWPMSR0 " << hex(s.lwpmsr0) << ", "
            << int{s.save_area.counter_count}
            << " slots: " << (err.ok() ? "accepted" : err.reason());
        ++seen[err.ok() ? 0 : 1];
        if (err.ok()) expect_loaded(unit, s, iter);
        unit.reset();
      }

      // Damage: truncation, bit flips, random tails, random bytes.
      for (int m = 0; m < 12; ++m) {
        std::vector<std::byte> bad = bytes;
        switch (r.below(4)) {
          case 0: bad.resize(r.below(bad.size() + 1)); break;
          case 1:
            for (int k = 0, n = static_cast<int>(r.range(1, 4)); k < n && !bad.empty(); ++k)
              bad[r.below(bad.size())] ^= static_cast<std::byte>(1u << r.below(8));
            break;
          case 2:
            for (int k = 0, n = static_cast<int>(r.range(1, 16)); k < n; ++k)
              bad.push_back(static_cast<std::byte>(r.next()));
            break;
          case 3:
            bad.resize(r.below(200));
            for (auto& b : bad) b = static_cast<std::byte>(r.next());
            break;
        }
        auto dd = deserialize(bad);
        if (!dd.ok()) {
          ++seen[4];
          EXPECT_FALSE(dd.reason().empty()) << "empty error message";
          continue;
        }
        const UnitState got = dd.value();
        auto again = deserialize(serialize(got));
        ASSERT_TRUE(again.ok()) << "accepted state does not re-serialise";
        EXPECT_TRUE(again.value() == got) << "accepted state is not canonical";
        const UnitState before = unit.state();
        const uint64_t gen_before = unit.generation();
        auto err = unit.load_state(got);
        EXPECT_EQ(err.ok(), load_state_acceptable(caps, got))
            << "load_state of LWPMSR0 " << hex(got.lwpmsr0) << ", "
            << int{got.save_area.counter_count}
            << " slots: " << (err.ok() ? "accepted" : err.reason());
        ++seen[err.ok() ? 2 : 3];
        if (!err.ok()) {
          EXPECT_TRUE(unit.state() == before)
              << "refused load_state changed the unit: " << err.reason();
          EXPECT_EQ(unit.generation(), gen_before);
        } else {
          EXPECT_EQ(got.lwpmsr0 & ~kMsr0DefinedBits, 0u)
              << "load_state accepted undefined LWPMSR0 bits";
          EXPECT_EQ(got.lwpmsr0 & kMsr0FeatureBits & ~allowed_features(caps), 0u)
              << "load_state accepted LWPMSR0 features the processor lacks: " << hex(got.lwpmsr0);
          EXPECT_FALSE(int_vector_below_16(got.lwpmsr0))
              << "load_state accepted INT with a vector below 16: " << hex(got.lwpmsr0);
          EXPECT_LE(got.save_area.counter_count, caps.max_events);
          expect_loaded(unit, got, iter);
          unit.enter_user();  // must not crash on whatever it accepted
          unit.reset();
        }
      }
      // Nothing is mapped: whatever was loaded, ring-3 entry must find the LWPCB invalid and turn
      // LWP off without trying to write it (a write attempt = a write before validation).
      EXPECT_TRUE(mem.writes().empty()) << "the unit wrote unmapped memory";
      EXPECT_EQ(mem.failed_writes(), 0u) << "the unit tried to write an LWPCB it had not validated";
    }
  }
  std::cout << "[coverage] load_state: generated " << seen[0] << " accepted / " << seen[1]
            << " refused, damaged " << seen[2] << " accepted / " << seen[3] << " refused, "
            << seen[4] << " damaged blobs rejected\n";
  // Both verdicts of load_state() must be exercised (measured: 855 / 345, 1292 / 967, 12141).
  EXPECT_GE(seen[0], 400u);
  EXPECT_GE(seen[1], 150u);
  EXPECT_GE(seen[2], 600u);
  EXPECT_GE(seen[3], 450u);
  EXPECT_GE(seen[4], 6000u);
}

}  // namespace
}  // namespace pmu::lwp
