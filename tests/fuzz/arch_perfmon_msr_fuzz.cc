// libFuzzer target for the virtual Intel architectural PMU (pmu/arch_perfmon/arch_pmu.h): any
// sequence of WRMSR/RDMSR a hostile guest kernel can issue, retirements, DEBUGCTL freeze bits,
// unseen batches, states loaded from untrusted values, on any valid configuration.
//
// The input is a program. Header (missing bytes read as zero):
//   byte 0  version 2 + b % 3          byte 3  fixed counters b % 4
//   byte 1  counters 1 + b % 8         byte 4  fixed counter bits 32 + b % 17
//   byte 2  counter bits 32 + b % 17   byte 5  bit 0 full-width writes, bit 1 third-level cache,
//                                              bit 2 PEBS, bit 3 LBR
// then operations until the input ends, each an opcode byte (taken % 9) and its operands:
//   0 WRMSR   msr (an index into the PMU's addresses, or raw), value
//   1 RDMSR   msr
//   2 retire  n (1..64), then per instruction: cpl, cycles, branch kind/taken/prediction,
//             cache-miss sources
//   3 set_debugctl  value
//   4 load_state    every field raw (refused or taken whole)
//   5 reset()
//   6 unseen batch  instructions, branches, conditional branches (only what unseen_allowance()
//                   admits)
//   7 quiet run     the PMU's quiet_retirements() - 1 instructions (at most 64)
//   8 DS poke       a quadword of the DS area's PEBS fields or reset values (the guest's memory:
//                   a 64 KiB window at kMemory, the DS area and a buffer in it, unmapped
//                   pages around it), its value raw or near the window
//
// Checked on every input (__builtin_trap otherwise): an MSR outside owns_msr() is never taken;
// a refused WRMSR changes nothing; a taken WRMSR of a select, a full-width counter, GLOBAL_CTRL or
// FIXED_CTR_CTRL reads back as written; the state is always one load_state() accepts; one
// instruction raises at most one PMI; a run shorter than quiet_retirements() overflows nothing;
// an admitted unseen batch raises no PMI and sets no overflow bit. PEBS: records only go into the
// window (FakeGuestMemory refuses the rest), the index moves by 0xC8 per record and never past
// the absolute maximum it was below, a wrapped PEBS counter sets no overflow bit of its own.
#include <cstddef>
#include <cstdint>
#include <span>

#include "pmu/arch_perfmon/arch_pmu.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/support/fake_guest_memory.h"
#include "tests/support/recording_interrupt_sink.h"

namespace {

namespace ap = pmu::arch_perfmon;

using pmuvm_fuzz::Input;

// The PMU's addresses and their neighbours; anything else comes raw.
constexpr uint32_t kAddresses[] = {0xC0,  0xC1,  0xC4,  0xC8,  0xC9,  0x185, 0x186, 0x189, 0x18D,
                                   0x18E, 0x308, 0x309, 0x30A, 0x30B, 0x30C, 0x345, 0x38C, 0x38D,
                                   0x38E, 0x38F, 0x390, 0x391, 0x392, 0x393, 0x4C0, 0x4C1, 0x4C5,
                                   0x4C8, 0x4C9, 0x1D9, 0x3F0, 0x3F1, 0x3F2, 0x3F6, 0x3F7, 0x5FF,
                                   0x600, 0x601, 0x1C7, 0x1C8, 0x1C9, 0x1CA, 0x67F, 0x680, 0x69F,
                                   0x6A0, 0x6BF, 0x6C0, 0x6DF, 0x6E0, 0xDBF, 0xDC0, 0xDDF, 0xDE0};

// The guest memory PEBS writes into: a window with the DS area at its start.
constexpr uint64_t kMemory = 0xFFFFFE0000000000, kWindow = 0x10000;

class FuzzMachine : public ap::PebsMachine {
 public:
  FuzzMachine() { memory.map(kMemory, kWindow); }
  pmu::GuestMemory& supervisor_memory() override { return memory; }
  ap::PebsRegisters registers_after() override { return {}; }
  pmu::testing::FakeGuestMemory memory;
};

uint32_t msr_of(Input& in) {
  const uint8_t b = in.u8();
  if (b < 0xF0) return kAddresses[b % std::size(kAddresses)];
  return in.u32();
}

pmu::RetiredInstruction instruction(Input& in) {
  pmu::RetiredInstruction i;
  const uint8_t a = in.u8(), b = in.u8(), c = in.u8();
  i.rip = 0x400000 + a;
  i.cpl = (a & 0x80) ? 0 : 3;
  i.cycles = b % 16;  // 0 is reported as 1
  i.branch.kind = static_cast<pmu::BranchKind>(c % 6);
  i.branch.taken = c & 0x08;
  i.branch.prediction_valid = c & 0x10;
  i.branch.predicted_correctly = c & 0x20;
  i.branch.indirect = b & 0x40;
  i.branch.next_rip = 0x400000 + (a ^ b);
  i.cache_miss_count = (c >> 6) % 3;
  for (uint8_t m = 0; m < i.cache_miss_count; ++m) {
    static constexpr pmu::DataSource kSources[] = {
        pmu::DataSource::kL2, pmu::DataSource::kLocalL3, pmu::DataSource::kDram,
        pmu::DataSource::kRemoteCache, pmu::DataSource::kOther};
    i.cache_misses[m].source = kSources[in.u8() % std::size(kSources)];
    i.cache_misses[m].latency_cycles = in.u8();
    i.cache_misses[m].data_address = 0x7FFF0000 + in.u8();
  }
  // Memory operands: loads (with the slowest one's latency), stores (with their L1 verdict).
  const uint8_t d = in.u8();
  i.loads = d & 1;
  i.stores = d & 2;
  i.store_hit_l1 = d & 4;
  i.load_address = i.loads ? 0x7FFF0000 + a : 0;
  i.store_address = i.stores ? 0x7FFF1000 + b : 0;
  i.load_latency = i.loads ? d >> 3 : 0;
  return i;
}

bool reads_back(uint32_t msr) {
  return (msr >= 0x186 && msr <= 0x18D) || (msr >= 0x4C1 && msr <= 0x4C8) || msr == 0x38D ||
         msr == 0x38F || msr == 0x3F6 || (msr >= 0x1C8 && msr <= 0x1C9) ||
         (msr >= 0x680 && msr <= 0x69F) || (msr >= 0x6C0 && msr <= 0x6DF) ||
         (msr >= 0xDC0 && msr <= 0xDDF);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  ap::Config c;
  c.version = 2 + in.u8() % 3;
  c.counters = 1 + in.u8() % 8;
  c.counter_bits = 32 + in.u8() % 17;
  c.fixed_counters = in.u8() % 4;
  c.fixed_counter_bits = 32 + in.u8() % 17;
  const uint8_t flags = in.u8();
  c.full_width_writes = flags & 1;
  c.third_level_cache = flags & 2;
  c.pebs = flags & 4;
  c.lbr = flags & 8;
  FUZZ_CHECK(ap::validate(c).ok());
  pmu::testing::RecordingInterruptSink sink;
  FuzzMachine machine;
  ap::ArchPmu pmu(c, sink, c.pebs ? &machine : nullptr);
  // Where the guest would put it: the DS area at the window's start, room for ten records, the
  // interrupt at the first (the input may change all of it).
  if (c.pebs) {
    FUZZ_CHECK(pmu.wrmsr(ap::kMsrDsArea, kMemory) == ap::MsrResult::kOk);
    const uint64_t base = kMemory + 0x100;
    machine.memory.poke_u64(kMemory + ap::ds::kPebsBufferBase, base);
    machine.memory.poke_u64(kMemory + ap::ds::kPebsIndex, base);
    machine.memory.poke_u64(kMemory + ap::ds::kPebsAbsoluteMaximum,
                            base + 10 * ap::kPebsRecordSize);
    machine.memory.poke_u64(kMemory + ap::ds::kPebsInterruptThreshold, base + ap::kPebsRecordSize);
  }
  // A DS field as the PMU would read it (0 where unreadable; peek would map the page).
  auto ds_u64 = [&](uint64_t offset) {
    uint64_t v = 0;
    machine.memory.read(pmu.state().ds_area + offset, std::as_writable_bytes(std::span(&v, 1)));
    return v;
  };

  auto overflow_bits = [&] {
    return pmu.state().global_status & (((uint64_t{1} << 32) - 1) | (uint64_t{7} << 32));
  };
  for (int ops = 0; !in.empty() && ops < 4096; ++ops) {
    switch (in.u8() % 9) {
      case 0: {
        const uint32_t msr = msr_of(in);
        const uint64_t value = in.u64();
        const ap::ArchPmuState before = pmu.state();
        const ap::MsrResult r = pmu.wrmsr(msr, value);
        FUZZ_CHECK((r == ap::MsrResult::kNotArchPerfmonMsr) == !ap::ArchPmu::owns_msr(msr));
        if (r != ap::MsrResult::kOk) FUZZ_CHECK(pmu.state() == before);
        if (r == ap::MsrResult::kOk && reads_back(msr)) {
          uint64_t back = 0;
          FUZZ_CHECK(pmu.rdmsr(msr, back) == ap::MsrResult::kOk && back == value);
        }
        break;
      }
      case 1: {
        const uint32_t msr = msr_of(in);
        uint64_t v = 0;
        const ap::MsrResult r = pmu.rdmsr(msr, v);
        FUZZ_CHECK((r == ap::MsrResult::kNotArchPerfmonMsr) == !ap::ArchPmu::owns_msr(msr));
        break;
      }
      case 2: {
        const int n = 1 + in.u8() % 64;
        for (int k = 0; k < n; ++k) {
          const int pmis = sink.pmis;
          const uint64_t records = pmu.stats().pebs_records;
          const uint64_t index = ds_u64(ap::ds::kPebsIndex);
          const uint64_t maximum = ds_u64(ap::ds::kPebsAbsoluteMaximum);
          const uint64_t pebs_status = pmu.state().global_status & pmu.state().pebs_enable & 0xF;
          pmu.retire(instruction(in));
          FUZZ_CHECK(sink.pmis - pmis <= 1);
          if (pmu.stats().pebs_records != records) {  // one record, where there was room
            FUZZ_CHECK(pmu.stats().pebs_records == records + 1);
            FUZZ_CHECK(ds_u64(ap::ds::kPebsIndex) == index + ap::kPebsRecordSize);
            FUZZ_CHECK(index <= maximum && maximum - index >= ap::kPebsRecordSize);
          }
          FUZZ_CHECK((pmu.state().global_status & pmu.state().pebs_enable & 0xF) == pebs_status);
        }
        break;
      }
      case 3: pmu.set_debugctl(in.u64()); break;
      case 4: {
        ap::ArchPmuState s;
        for (auto& v : s.evtsel) v = in.u64();
        for (auto& v : s.pmc) v = in.u64();
        for (auto& v : s.fixed) v = in.u64();
        s.fixed_ctrl = in.u64();
        s.global_ctrl = in.u64();
        s.global_status = in.u64();
        s.debugctl = in.u64();
        s.edge_previous = in.u32();
        s.pebs_enable = in.u64();
        s.ds_area = in.u64();
        s.lbr.select = in.u64();
        s.lbr.tos = in.u32();
        s.lbr.cycles = in.u32();
        s.lbr.info[in.u8() % 32] = in.u64();
        s.lbr.from[in.u8() % 32] = in.u64();
        const ap::ArchPmuState before = pmu.state();
        if (!pmu.load_state(s).ok()) FUZZ_CHECK(pmu.state() == before);
        break;
      }
      case 5: pmu.reset(); break;
      case 6: {
        pmu::UnseenRetirements batch{in.u32() % 100000, in.u32() % 100000};
        batch.conditional_branches = in.u32() % (batch.branches + 1);
        if (!pmu.unseen_allowance().admits(batch)) break;
        const int pmis = sink.pmis;
        const uint64_t overflowed = overflow_bits();
        pmu.retire_unseen(batch);
        FUZZ_CHECK(sink.pmis == pmis && overflow_bits() == overflowed);
        break;
      }
      case 7: {
        const uint64_t quiet = pmu.quiet_retirements();
        FUZZ_CHECK(quiet >= 1);
        const uint64_t overflowed = overflow_bits();
        for (uint64_t k = 1; k < quiet && k <= 64; ++k) pmu.retire(instruction(in));
        FUZZ_CHECK(overflow_bits() == overflowed);
        break;
      }
      case 8: {
        const uint8_t field = in.u8() % 12;  // base, index, maximum, threshold, 8 resets
        const uint8_t how = in.u8();
        const uint64_t raw = in.u64();
        const uint64_t value = how & 1 ? kMemory + raw % (kWindow + 0x400) : raw;
        machine.memory.poke_u64(kMemory + ap::ds::kPebsBufferBase + 8 * field, value);
        break;
      }
    }
    // Whatever happened, the state is one this PMU would load.
    ap::ArchPmu copy(c, sink, c.pebs ? &machine : nullptr);
    FUZZ_CHECK(copy.load_state(pmu.state()).ok());
  }
  return 0;
}
