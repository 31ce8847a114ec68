// PEBS, format 3 (SDM vol. 3B 18.4.4 "Debug Store (DS) Mechanism", the Skylake PEBS record;
// Linux's arch/x86/events/intel/ds.c is the guest that programs it): the MSRs, the record's bytes
// at the DS area's index, the counter reset, the interrupt threshold, and the cases with no room
// or no memory. Offsets and bits are written from the SDM, not taken from pmu/arch_perfmon.
#include <gtest/gtest.h>

#include "tests/arch_perfmon/arch_pmu_fixture.h"
#include "tests/support/fake_guest_memory.h"

namespace pmu::arch_perfmon::testing {
namespace {

inline constexpr uint32_t IA32_PEBS_ENABLE = 0x3F1;
inline constexpr uint32_t IA32_DS_AREA = 0x600;
inline constexpr uint32_t MSR_PEBS_LD_LAT_THRESHOLD = 0x3F6;
inline constexpr uint64_t MEM_TRANS_RETIRED_LOAD_LATENCY = 0x01CD,
                          MEM_INST_RETIRED_ALL_LOADS = 0x81D0, MEM_INST_RETIRED_ALL_STORES = 0x82D0;
// DS save area, 64-bit layout.
inline constexpr uint64_t PEBS_BASE = 0x20, PEBS_INDEX = 0x28, PEBS_MAX = 0x30,
                          PEBS_THRESHOLD = 0x38, PEBS_RESET0 = 0x40;
inline constexpr uint64_t RECORD = 0xC8;  // format 3: 25 quadwords
inline constexpr uint64_t OVF_BUFFER = 1ull << 62;

inline constexpr uint64_t kDs = 0xFFFFFE0000001000;      // a kernel address, like Linux's CEA
inline constexpr uint64_t kBuffer = 0xFFFFFE0000010000;  // room for 16 records

class Machine : public PebsMachine {
 public:
  GuestMemory& supervisor_memory() override { return memory; }
  PebsRegisters registers_after() override {
    ++reads;
    return regs;
  }
  pmu::testing::FakeGuestMemory memory;
  PebsRegisters regs;
  int reads = 0;
};

class PebsTest : public ArchPmuTest {
 protected:
  void SetUp() override {
    Config c;
    c.pebs = true;
    pmu_ = std::make_unique<ArchPmu>(c, sink_, &machine_);
    machine_.memory.map(kDs, 0x100);
    machine_.memory.map(kBuffer, 16 * RECORD);
    PebsRegisters& r = machine_.regs;  // RAX..R15 in the record's order: 0x1000 + i
    uint64_t* in_order[] = {&r.rax, &r.rbx, &r.rcx, &r.rdx, &r.rsi, &r.rdi, &r.rbp, &r.rsp,
                            &r.r8,  &r.r9,  &r.r10, &r.r11, &r.r12, &r.r13, &r.r14, &r.r15};
    for (int i = 0; i < 16; ++i) *in_order[i] = 0x1000 + i;
    machine_.regs.rflags = 0x246;
    machine_.regs.rip = 0x401003;
    machine_.regs.tsc = 123456789;
  }
  // Linux's layout: `records` fit, the interrupt after `threshold_records`.
  void set_buffer(uint64_t records, uint64_t threshold_records) {
    auto& m = machine_.memory;
    m.poke_u64(kDs + PEBS_BASE, kBuffer);
    m.poke_u64(kDs + PEBS_INDEX, kBuffer);
    m.poke_u64(kDs + PEBS_MAX, kBuffer + records * RECORD);
    m.poke_u64(kDs + PEBS_THRESHOLD, kBuffer + threshold_records * RECORD);
  }
  // PMC0 counts user instructions, PEBS on, `period` to its record; INT clear as Linux has it.
  void arm_pmc0(uint64_t period, uint64_t reset) {
    ok(IA32_DS_AREA, kDs);
    machine_.memory.poke_u64(kDs + PEBS_RESET0, reset);
    ok(IA32_PMC0, (0 - period) & kMask48);
    ok(IA32_PERFEVTSEL0, EN | USR | INST_RETIRED);
    ok(IA32_PEBS_ENABLE, 1);
  }
  uint64_t index() { return machine_.memory.peek_u64(kDs + PEBS_INDEX); }
  uint64_t record_word(int record, int word) {
    return machine_.memory.peek_u64(kBuffer + record * RECORD + 8 * word);
  }
  static RetiredInstruction at(uint64_t rip) {
    RetiredInstruction i = insn();
    i.rip = rip;
    return i;
  }

  Machine machine_;
};

TEST_F(PebsTest, CapabilitiesSayFormat3WithRegistersAfterTheEvent) {
  // PERF_CAPABILITIES: PEBS_TRAP (6), PEBS_ARCH_REG (7), PEBS_REC_FMT (11:8) = 3, FW_WRITE (13).
  EXPECT_EQ(rd(IA32_PERF_CAPABILITIES), (1ull << 6) | (1ull << 7) | (3ull << 8) | (1ull << 13));
}

TEST_F(PebsTest, WithoutPebsItsMsrsAreGeneralProtection) {
  make();  // Config::pebs false
  gp(IA32_PEBS_ENABLE, 0);
  gp(IA32_DS_AREA, 0);
  gp(MSR_PEBS_LD_LAT_THRESHOLD, 3);
  uint64_t v = 0;
  EXPECT_EQ(pmu().rdmsr(MSR_PEBS_LD_LAT_THRESHOLD, v), MsrResult::kGeneralProtection);
  EXPECT_EQ(pmu().rdmsr(IA32_PEBS_ENABLE, v), MsrResult::kGeneralProtection);
  EXPECT_EQ(pmu().rdmsr(IA32_DS_AREA, v), MsrResult::kGeneralProtection);
  EXPECT_EQ(rd(IA32_PERF_CAPABILITIES), 1ull << 13);
}

TEST_F(PebsTest, PebsEnableTakesPmc0To3AndTheirLoadLatencyBits) {
  ok(IA32_PEBS_ENABLE, 0xFull | (0xFull << 32));
  EXPECT_EQ(rd(IA32_PEBS_ENABLE), 0xFull | (0xFull << 32));
  gp(IA32_PEBS_ENABLE, 1ull << 4);   // PMC4: no PEBS on Skylake
  gp(IA32_PEBS_ENABLE, 1ull << 36);  // its load latency
  gp(IA32_PEBS_ENABLE, 1ull << (32 + 31));
  gp(IA32_PEBS_ENABLE, 1ull << 63);
  EXPECT_EQ(rd(IA32_PEBS_ENABLE), 0xFull | (0xFull << 32));  // a refused write changes nothing
}

TEST_F(PebsTest, PebsEnableHasOnlyTheCountersThatExist) {
  Config c;
  c.pebs = true;
  c.counters = 2;
  pmu_ = std::make_unique<ArchPmu>(c, sink_, &machine_);
  ok(IA32_PEBS_ENABLE, 0x3 | (0x3ull << 32));
  gp(IA32_PEBS_ENABLE, 0x4);
}

TEST_F(PebsTest, DsAreaTakesCanonicalAddressesOnly) {
  ok(IA32_DS_AREA, kDs);
  EXPECT_EQ(rd(IA32_DS_AREA), kDs);
  ok(IA32_DS_AREA, 0x00007FFFFFFFF000);
  gp(IA32_DS_AREA, 0x0000800000000000);
  gp(IA32_DS_AREA, 0xFFFF7FFFFFFFF000);
  EXPECT_EQ(rd(IA32_DS_AREA), 0x00007FFFFFFFF000);
}

TEST_F(PebsTest, TheEventThatWrapsTheCounterGetsTheRecord) {
  set_buffer(16, 1);
  arm_pmc0(3, 0);
  pmu().retire(at(0x401000));
  pmu().retire(at(0x401001));
  EXPECT_EQ(index(), kBuffer);  // nothing yet
  EXPECT_EQ(sink_.pmis, 0);
  pmu().retire(at(0x401002));  // the third: its record, zero skid
  ASSERT_EQ(index(), kBuffer + RECORD);
  EXPECT_EQ(record_word(0, 0), 0x246u);     // RFLAGS
  EXPECT_EQ(record_word(0, 1), 0x401003u);  // RIP after it
  for (int i = 0; i < 16; ++i) EXPECT_EQ(record_word(0, 2 + i), 0x1000u + i) << "register " << i;
  EXPECT_EQ(record_word(0, 18), 1u);          // applicable counters: PMC0
  EXPECT_EQ(record_word(0, 19), 0u);          // data linear address
  EXPECT_EQ(record_word(0, 20), 0u);          // data source
  EXPECT_EQ(record_word(0, 21), 0u);          // latency
  EXPECT_EQ(record_word(0, 22), 0x401002u);   // eventing IP
  EXPECT_EQ(record_word(0, 23), 0u);          // TSX
  EXPECT_EQ(record_word(0, 24), 123456789u);  // TSC
  // At the threshold: OvfBuf and the PMI; the counter's own overflow bit stays clear.
  EXPECT_EQ(sink_.pmis, 1);
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_STATUS), OVF_BUFFER);
  EXPECT_EQ(pmu().stats().pebs_records, 1u);
}

TEST_F(PebsTest, TheCounterReloadsFromItsResetValueAndRecordsAccumulateToTheThreshold) {
  set_buffer(16, 3);
  arm_pmc0(2, (0 - 2ull) & kMask48);  // Linux's auto-reload: the reset value is -period
  for (uint64_t i = 0; i < 6; ++i) pmu().retire(at(0x500000 + i));
  EXPECT_EQ(index(), kBuffer + 3 * RECORD);
  EXPECT_EQ(record_word(0, 22), 0x500001u);
  EXPECT_EQ(record_word(1, 22), 0x500003u);
  EXPECT_EQ(record_word(2, 22), 0x500005u);
  EXPECT_EQ(sink_.pmis, 1);  // at the third record only
  EXPECT_EQ(rd(IA32_PMC0), (0 - 2ull) & kMask48);
  ok(IA32_PERF_GLOBAL_STATUS_RESET, OVF_BUFFER);
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_STATUS), 0u);
}

TEST_F(PebsTest, OneRecordNamesEveryPebsCounterTheInstructionWrapped) {
  set_buffer(16, 1);
  arm_pmc0(1, 0);
  ok(IA32_PMC0 + 2, kMask48);  // PMC2: one branch to wrap
  ok(IA32_PERFEVTSEL0 + 2, EN | USR | BR_ALL);
  ok(IA32_PEBS_ENABLE, 0x5);
  RetiredInstruction b = branch(BranchKind::kConditional);
  b.rip = 0x402000;
  pmu().retire(b);
  EXPECT_EQ(index(), kBuffer + RECORD);
  EXPECT_EQ(record_word(0, 18), 0x5u);
  EXPECT_EQ(machine_.reads, 1);
  EXPECT_EQ(sink_.pmis, 1);
}

TEST_F(PebsTest, ACounterWithoutPebsStillOverflowsAsBefore) {
  set_buffer(16, 1);
  arm_pmc0(5, 0);
  ok(IA32_PMC0 + 1, kMask48);
  ok(IA32_PERFEVTSEL0 + 1, EN | USR | INT | INST_RETIRED);
  pmu().retire(at(0x401000));
  EXPECT_EQ(rd(IA32_PERF_GLOBAL_STATUS), 0x2u);
  EXPECT_EQ(sink_.pmis, 1);
  EXPECT_EQ(index(), kBuffer);
}

TEST_F(PebsTest, AFullBufferTakesNoRecordAndRaisesNothing) {
  set_buffer(1, 2);  // one record of room, the threshold beyond it
  arm_pmc0(1, (0 - 1ull) & kMask48);
  pmu().retire(at(0x401000));
  pmu().retire(at(0x401001));
  EXPECT_EQ(index(), kBuffer + RECORD);
  EXPECT_EQ(record_word(0, 22), 0x401000u);
  EXPECT_EQ(pmu().stats().pebs_records, 1u);
  EXPECT_EQ(pmu().stats().pebs_dropped, 1u);
  EXPECT_EQ(sink_.pmis, 0);
  EXPECT_EQ(rd(IA32_PMC0), (0 - 1ull) & kMask48);  // reloaded all the same
}

TEST_F(PebsTest, AnUnmappedBufferOrDsAreaIsNeverACrash) {
  set_buffer(16, 1);
  arm_pmc0(1, 0);
  machine_.memory.unmap(kBuffer, 16 * RECORD);
  pmu().retire(at(0x401000));
  EXPECT_EQ(index(), kBuffer);  // the index moves only with a record
  EXPECT_EQ(pmu().stats().pebs_dropped, 1u);
  ok(IA32_DS_AREA, 0x7000);  // nothing mapped there
  ok(IA32_PMC0, kMask48);
  pmu().retire(at(0x401001));
  EXPECT_EQ(pmu().stats().pebs_dropped, 2u);
  EXPECT_EQ(rd(IA32_PMC0), 0u);  // an unreadable reset value is 0
  EXPECT_EQ(sink_.pmis, 0);
}

// DS_AREA only has to be canonical: one at the top of the address space, whose fields would wrap
// to low addresses, reaches nothing (here the wrapped addresses are mapped: nothing is read).
TEST_F(PebsTest, ADsAreaWhoseFieldsWrapIsUnreachable) {
  machine_.memory.map(0, 0x1000);
  ok(IA32_DS_AREA, 0xFFFFFFFFFFFFFFF0);
  ok(IA32_PMC0, kMask48);
  ok(IA32_PERFEVTSEL0, EN | USR | INST_RETIRED);
  ok(IA32_PEBS_ENABLE, 1);
  machine_.memory.clear_log();
  pmu().retire(at(0x401000));
  EXPECT_EQ(pmu().stats().pebs_dropped, 1u);
  EXPECT_TRUE(machine_.memory.reads().empty());
  EXPECT_TRUE(machine_.memory.writes().empty());
  EXPECT_EQ(rd(IA32_PMC0), 0u);
}

TEST_F(PebsTest, AnIndexPastTheMaximumTakesNoRecord) {
  set_buffer(16, 1);
  machine_.memory.poke_u64(kDs + PEBS_INDEX, kBuffer + 17 * RECORD);  // a guest's bad index
  arm_pmc0(1, 0);
  pmu().retire(at(0x401000));
  EXPECT_EQ(pmu().stats().pebs_dropped, 1u);
  EXPECT_TRUE(machine_.memory.writes().empty());
}

TEST_F(PebsTest, TheLoadLatencyThresholdHasSixteenBits) {
  EXPECT_EQ(rd(MSR_PEBS_LD_LAT_THRESHOLD), 0u);
  ok(MSR_PEBS_LD_LAT_THRESHOLD, 30);
  ok(MSR_PEBS_LD_LAT_THRESHOLD, 0xFFFF);
  gp(MSR_PEBS_LD_LAT_THRESHOLD, 0x10000);
  gp(MSR_PEBS_LD_LAT_THRESHOLD, 1ull << 63);
  EXPECT_EQ(rd(MSR_PEBS_LD_LAT_THRESHOLD), 0xFFFFu);
}

// MEM_TRANS_RETIRED.LOAD_LATENCY counts the loads slower than the threshold; its record has the
// load's address, where its data came from (bits 3:0) and the latency.
TEST_F(PebsTest, ALoadLatencyRecordSaysWhereTheLoadWentAndHowLongItTook) {
  set_buffer(16, 16);
  ok(IA32_DS_AREA, kDs);
  ok(MSR_PEBS_LD_LAT_THRESHOLD, 30);
  ok(IA32_PMC0, (0 - 2) & kMask48);
  ok(IA32_PERFEVTSEL0, EN | USR | MEM_TRANS_RETIRED_LOAD_LATENCY);
  ok(IA32_PEBS_ENABLE, 1 | (1ull << 32));
  EXPECT_TRUE(pmu().reads_cache_model());
  RetiredInstruction hit = at(0x401000);  // an L1 hit: 4 cycles, not above 30
  hit.loads = true;
  hit.load_address = 0x7FFF0000;
  hit.load_latency = 4;
  pmu().retire(hit);
  EXPECT_EQ(rd(IA32_PMC0), (0 - 2) & kMask48) << "not counted";
  RetiredInstruction l3 = at(0x401010);  // an L3 hit: 42 cycles
  l3.loads = true;
  l3.load_address = 0x7FFF0040;
  l3.load_latency = 42;
  l3.cache_misses[0] = {
      .data_address = 0x7FFF0040, .latency_cycles = 42, .source = DataSource::kLocalL3};
  l3.cache_miss_count = 1;
  pmu().retire(l3);
  EXPECT_EQ(index(), kBuffer);
  RetiredInstruction dram = l3;  // DRAM, its second load the slower
  dram.rip = 0x401020;
  dram.load_latency = 250;
  dram.cache_misses[1] = {
      .data_address = 0x7FFF8000, .latency_cycles = 250, .source = DataSource::kDram};
  dram.cache_miss_count = 2;
  pmu().retire(dram);
  ASSERT_EQ(index(), kBuffer + RECORD);
  EXPECT_EQ(record_word(0, 19), 0x7FFF8000u);  // data linear address
  EXPECT_EQ(record_word(0, 20), 0xAu);         // data source: L3 miss, local DRAM
  EXPECT_EQ(record_word(0, 21), 250u);         // latency
  EXPECT_EQ(record_word(0, 22), 0x401020u);
}

TEST_F(PebsTest, LoadAndStoreRecordsHaveTheirDataAddress) {
  set_buffer(16, 16);
  ok(IA32_DS_AREA, kDs);
  ok(IA32_PMC0, (0 - 1) & kMask48);
  ok(IA32_PMC0 + 1, (0 - 1) & kMask48);
  ok(IA32_PERFEVTSEL0, EN | USR | MEM_INST_RETIRED_ALL_LOADS);
  ok(IA32_PERFEVTSEL0 + 1, EN | USR | MEM_INST_RETIRED_ALL_STORES);
  EXPECT_FALSE(pmu().reads_cache_model()) << "counting loads and stores needs no cache model";
  ok(IA32_PEBS_ENABLE, 0x2);  // the store counter first
  EXPECT_TRUE(pmu().reads_cache_model()) << "the store's record says whether it hit the L1";
  RetiredInstruction rmw = at(0x401000);  // add %rax, (%rsp)
  rmw.loads = rmw.stores = true;
  rmw.load_address = rmw.store_address = 0x7FFF0008;
  rmw.store_hit_l1 = true;
  pmu().retire(rmw);
  ASSERT_EQ(index(), kBuffer + RECORD);
  EXPECT_EQ(record_word(0, 19), 0x7FFF0008u);
  EXPECT_EQ(record_word(0, 20), 1u) << "the store hit the L1";
  EXPECT_EQ(record_word(0, 21), 0u);
  ok(IA32_PEBS_ENABLE, 0x1);
  ok(IA32_PMC0, (0 - 1) & kMask48);  // (it wrapped without PEBS at the add)
  RetiredInstruction load = at(0x401010);
  load.loads = true;
  load.load_address = 0x7FFF0010;
  pmu().retire(load);
  ASSERT_EQ(index(), kBuffer + 2 * RECORD);
  EXPECT_EQ(record_word(1, 19), 0x7FFF0010u);
  EXPECT_EQ(record_word(1, 20), 0u);
}

TEST_F(PebsTest, StateCarriesPebsAndRefusesWhatDoesNotFit) {
  ok(IA32_DS_AREA, kDs);
  ok(IA32_PEBS_ENABLE, 0x9);
  ArchPmuState s = pmu().state();
  EXPECT_EQ(s.ds_area, kDs);
  EXPECT_EQ(s.pebs_enable, 0x9u);
  pmu().reset();
  ASSERT_TRUE(pmu().load_state(s).ok());
  EXPECT_EQ(rd(IA32_PEBS_ENABLE), 0x9u);
  ArchPmuState bad = s;
  bad.pebs_enable = 1ull << 4;
  EXPECT_FALSE(pmu().load_state(bad).ok());
  bad = s;
  bad.ds_area = 0x0000800000000000;
  EXPECT_FALSE(pmu().load_state(bad).ok());
  bad = s;
  bad.ld_lat_threshold = 0x10000;
  EXPECT_FALSE(pmu().load_state(bad).ok());
  bad.ld_lat_threshold = 0xFFFF;
  EXPECT_TRUE(pmu().load_state(bad).ok());
  make();  // no PEBS: a state with a DS area does not fit
  EXPECT_FALSE(pmu().load_state(s).ok());
}

TEST_F(PebsTest, APebsPmuNeedsAMachine) {
  Config c;
  c.pebs = true;
  EXPECT_THROW(ArchPmu(c, sink_), std::invalid_argument);
}

}  // namespace
}  // namespace pmu::arch_perfmon::testing
