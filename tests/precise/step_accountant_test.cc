// The precise backend's shared counting step fed into a real LwpUnit: exact records for a
// hand-assembled loop, the DESIGN §4.4 counting rules, and DCache misses from the cache model.
#include "vmm/precise/step_accountant.h"

#include <gtest/gtest.h>

#include <vector>

#include "pmu/lwp/lwp_unit.h"
#include "pmu/state_archive.h"
#include "tests/support/fake_guest_memory.h"
#include "tests/support/recording_interrupt_sink.h"

namespace vmm {
namespace {

using pmu::BranchKind;

pmu::cache::Geometry small_cache() {
  pmu::cache::Geometry g;
  g.line_size = 64;
  g.l1d = {1024, 2, 4};
  g.l2 = {4096, 4, 12};
  g.l3 = {16384, 4, 40};
  g.dram_latency_cycles = 200;
  return g;
}

TEST(StepAccountantTest, LwpInstructionsDoNotRetireAndSyscallIsNotABranch) {
  StepAccountant acc(small_cache());
  GuestRegisters r{.rip = 0x400000};
  const std::vector<uint8_t> llwpcb = {0x8f, 0xe9, 0x78, 0x12, 0xc0};
  EXPECT_FALSE(acc.account(r, llwpcb, 3, 0x400005).has_value());
  const std::vector<uint8_t> syscall = {0x0f, 0x05};
  auto s = acc.account(r, syscall, 3, 0x400002);
  ASSERT_TRUE(s.has_value());
  EXPECT_FALSE(s->is_branch());
  EXPECT_EQ(s->cycles, 1u);
}

TEST(StepAccountantTest, ConditionalBranchTakenAndNotTaken) {
  StepAccountant acc(small_cache());
  GuestRegisters r{.rip = 0x401000};
  const std::vector<uint8_t> jnz = {0x75, 0xfe - 0x10};  // jnz -0x12: target 0x400ff0
  auto taken = acc.account(r, jnz, 3, 0x400ff0);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->branch.kind, BranchKind::kConditional);
  EXPECT_TRUE(taken->branch.taken);
  EXPECT_EQ(taken->branch.next_rip, 0x400ff0u);
  EXPECT_TRUE(taken->branch.prediction_valid);
  auto fell = acc.account(r, jnz, 3, 0x401002);
  EXPECT_FALSE(fell->branch.taken);
  EXPECT_EQ(fell->branch.next_rip, 0x401002u);  // fall-through address (§4.2)
}

TEST(StepAccountantTest, LoadsMissThenHitAndCarryLatency) {
  StepAccountant acc(small_cache());
  GuestRegisters r{.rbx = 0x10000, .rip = 0x400000};
  const std::vector<uint8_t> load = {0x48, 0x8b, 0x03};  // mov rax, [rbx]
  auto first = acc.account(r, load, 3, 0x400003);
  ASSERT_EQ(first->cache_miss_count, 1);
  EXPECT_EQ(first->cache_misses[0].source, pmu::DataSource::kDram);
  EXPECT_EQ(first->cache_misses[0].data_address, 0x10000u);
  EXPECT_EQ(first->cycles, 201u);
  auto second = acc.account(r, load, 3, 0x400003);
  EXPECT_EQ(second->cache_miss_count, 0);
  EXPECT_EQ(second->cycles, 1u);
}

// MEM_INST_RETIRED's loads and stores come from the decoder, with or without the cache model:
// explicit operands, the stack's implicit ones, not LEA.
TEST(StepAccountantTest, LoadsAndStoresAreTheInstructionsDataOperands) {
  StepAccountant acc(small_cache());
  bool cache = false;
  acc.set_model_demand([&] { return StepAccountant::ModelDemand{.cache = cache}; });
  GuestRegisters r{.rbx = 0x10000, .rsp = 0x20000, .rip = 0x400000};
  struct Case {
    std::vector<uint8_t> bytes;
    bool loads, stores;
    const char* what;
  };
  const Case cases[] = {
      {{0x48, 0x8b, 0x03}, true, false, "mov rax, [rbx]"},
      {{0x48, 0x89, 0x03}, false, true, "mov [rbx], rax"},
      {{0x48, 0x01, 0x03}, true, true, "add [rbx], rax"},
      {{0x48, 0x8d, 0x03}, false, false, "lea rax, [rbx]"},
      {{0x50}, false, true, "push rax"},
      {{0x58}, true, false, "pop rax"},
      {{0x48, 0x01, 0xd8}, false, false, "add rax, rbx"},
  };
  for (bool with_cache : {false, true}) {
    cache = with_cache;
    for (const Case& c : cases) {
      const auto i = acc.account(r, c.bytes, 3, 0x400000 + c.bytes.size());
      ASSERT_TRUE(i) << c.what;
      EXPECT_EQ(i->loads, c.loads) << c.what << " cache " << with_cache;
      EXPECT_EQ(i->stores, c.stores) << c.what << " cache " << with_cache;
    }
  }
}

// Issue 21: while no enabled event uses the cache model, loads and stores leave it alone (no
// misses, one cycle each) and its state stays small; once one does, it starts cold.
TEST(StepAccountantTest, CacheModelIsLeftAloneWhileNoEventUsesIt) {
  pmu::cache::Geometry large = small_cache();
  large.l2 = {2 << 20, 16, 12};
  large.l3 = {8 << 20, 16, 40};
  StepAccountant acc(large);
  bool demand = false;
  acc.set_model_demand([&] { return StepAccountant::ModelDemand{.cache = demand}; });
  GuestRegisters r{.rbx = 0x10000, .rip = 0x400000};
  const std::vector<uint8_t> load = {0x48, 0x8b, 0x03};   // mov rax, [rbx]
  const std::vector<uint8_t> store = {0x48, 0x89, 0x03};  // mov [rbx], rax
  for (uint64_t i = 0; i < 1000; ++i) {
    r.rbx = 0x10000 + i * 4096;
    auto l = acc.account(r, load, 3, 0x400003);
    ASSERT_EQ(l->cache_miss_count, 0);
    EXPECT_EQ(l->cycles, 1u);
    acc.account(r, store, 3, 0x400003);
  }
  pmu::StateWriter w;
  acc.archive(w);
  EXPECT_LT(w.bytes().size(), 64u << 10) << "the issue's bound for instruction/branch events";
  demand = true;
  r.rbx = 0x10000;
  EXPECT_EQ(acc.account(r, load, 3, 0x400003)->cache_miss_count, 1) << "cold: nothing was filled";
  EXPECT_EQ(acc.account(r, load, 3, 0x400003)->cache_miss_count, 0);
}

// While no enabled event reads predictions, branches carry none and leave the predictor as it
// was: it then predicts as if they had never retired (DESIGN §4.11: the host backend's unseen
// branches cannot train it either, and both backends must give the same records).
TEST(StepAccountantTest, PredictorIsLeftAloneWhileNoEventReadsIt) {
  StepAccountant idle(small_cache()), trained(small_cache()), fresh(small_cache());
  bool demand = false;
  idle.set_model_demand([&] { return StepAccountant::ModelDemand{.predictor = demand}; });
  const GuestRegisters r{.rip = 0x400008};
  const std::vector<uint8_t> jne_back = {0x75, 0xf6};  // jne 0x400000
  for (int i = 0; i < 20; ++i) {
    const auto b = idle.account(r, jne_back, 3, 0x400000);
    ASSERT_TRUE(b);
    EXPECT_EQ(b->branch.kind, pmu::BranchKind::kConditional);
    EXPECT_TRUE(b->branch.taken);
    EXPECT_EQ(b->branch.next_rip, 0x400000u);
    EXPECT_FALSE(b->branch.prediction_valid);
    trained.account(r, jne_back, 3, 0x400000);
  }
  const auto not_taken = idle.account(r, jne_back, 3, 0x40000a);
  EXPECT_FALSE(not_taken->branch.taken);
  demand = true;
  const auto after_idle = idle.account(r, jne_back, 3, 0x400000);
  const auto after_fresh = fresh.account(r, jne_back, 3, 0x400000);
  const auto after_training = trained.account(r, jne_back, 3, 0x400000);
  ASSERT_TRUE(after_idle->branch.prediction_valid);
  EXPECT_EQ(after_idle->branch.predicted_correctly, after_fresh->branch.predicted_correctly);
  EXPECT_FALSE(after_fresh->branch.predicted_correctly) << "cold: weakly not taken";
  EXPECT_TRUE(after_training->branch.predicted_correctly);
}

// A loop the LWP model counts exactly: 3 instructions per iteration, 10 iterations.
//   0x400000: add rax, 1        48 83 c0 01
//   0x400004: cmp rax, 10       48 83 f8 0a
//   0x400008: jne 0x400000      75 f6
TEST(StepAccountantTest, KnownLoopGivesExactLwpRecords) {
  pmu::testing::FakeGuestMemory mem;
  pmu::testing::RecordingInterruptSink irq;
  pmu::lwp::Capabilities caps{true, true, true, true, true, 3, 10, true, true, true, 1};
  pmu::lwp::LwpUnit lwp(caps, {0, 1}, mem, irq);
  mem.map(0x10000, 0x1000);
  mem.map(0x20000, 0x1000);
  pmu::lwp::Lwpcb cb;
  cb.buffer_size = 32 * 64;
  cb.buffer_base = 0x20000;
  cb.slots = {{1, 7, 0}, {2, 4, 0}, {0, 0, 0}};  // every 7th instruction, every 4th branch
  mem.poke(0x10000, pmu::lwp::encode_lwpcb(cb));
  ASSERT_EQ(lwp.write_msr(pmu::lwp::kMsrLwpFeatureEnable, 0xF, 0), pmu::lwp::MsrResult::kOk);
  ASSERT_EQ(lwp.write_msr(pmu::lwp::kMsrLwpControlBlock, 0x10000, 3), pmu::lwp::MsrResult::kOk);

  StepAccountant acc(small_cache());
  const std::vector<uint8_t> add = {0x48, 0x83, 0xc0, 0x01};
  const std::vector<uint8_t> cmp = {0x48, 0x83, 0xf8, 0x0a};
  const std::vector<uint8_t> jne = {0x75, 0xf6};
  GuestRegisters r{};
  for (uint64_t rax = 0; rax < 10;) {
    r.rip = 0x400000;
    lwp.retire(*acc.account(r, add, 3, 0x400004));
    ++rax;
    r.rip = 0x400004;
    lwp.retire(*acc.account(r, cmp, 3, 0x400008));
    r.rip = 0x400008;
    lwp.retire(*acc.account(r, jne, 3, rax == 10 ? 0x40000a : 0x400000));
  }
  uint64_t address = 0;
  lwp.read_msr(pmu::lwp::kMsrLwpControlBlock, 3, address);
  const uint32_t head = mem.peek_u32(0x10000 + 16);
  std::vector<std::pair<uint8_t, uint64_t>> records;
  for (uint32_t off = 0; off < head; off += 32) {
    auto bytes = mem.peek(0x20000 + off, 32);
    pmu::lwp::EventRecordBytes rec;
    std::copy(bytes.begin(), bytes.end(), rec.begin());
    auto d = pmu::lwp::decode_record(rec);
    records.push_back({d.event_id, d.rip});
  }
  // 30 instructions: instruction records at the 7th, 14th, 21st, 28th (rips: i%3 -> add/cmp/jne);
  // branch records at the 4th and 8th jne (the 12th and 24th instruction). No instruction expires
  // both counters at once here.
  const std::vector<std::pair<uint8_t, uint64_t>> expected = {
      {1, 0x400000}, {2, 0x400008}, {1, 0x400004}, {1, 0x400008}, {2, 0x400008}, {1, 0x400000}};
  EXPECT_EQ(records, expected);
}

// The last mnemonic comes back from a snapshot as a number: one that names no Zydis mnemonic is
// refused (held in the enum it was undefined behaviour: UBSan in stepper_state_fuzz).
TEST(StepAccountantTest, ALoadedMnemonicMustNameOne) {
  auto load_with = [](uint64_t mnemonic) -> std::string {
    StepAccountant saved(small_cache());
    pmu::StateWriter w;
    w(saved);
    std::vector<std::byte> bytes = w.take();
    // The mnemonic is the archive's last field: 4 bytes, little-endian.
    for (int i = 0; i < 4; ++i)
      bytes[bytes.size() - 4 + i] = static_cast<std::byte>(mnemonic >> (8 * i));
    StepAccountant loaded(small_cache());
    try {
      pmu::StateReader r(bytes);
      r(loaded);
      r.expect_end();
      return loaded.last_mnemonic() == static_cast<ZydisMnemonic>(mnemonic) ? "" : "changed";
    } catch (const pmu::StateFormatError& e) {
      return e.what();
    }
  };
  EXPECT_EQ(load_with(ZYDIS_MNEMONIC_MAX_VALUE), "");
  EXPECT_EQ(load_with(ZYDIS_MNEMONIC_INVALID), "");
  EXPECT_EQ(load_with(uint64_t{ZYDIS_MNEMONIC_MAX_VALUE} + 1),
            "step accountant: mnemonic " + std::to_string(ZYDIS_MNEMONIC_MAX_VALUE + 1) +
                " is not one Zydis knows");
  EXPECT_EQ(load_with(0x10FFFFFF), "step accountant: mnemonic 285212671 is not one Zydis knows");
}

}  // namespace
}  // namespace vmm
