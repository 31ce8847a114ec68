// What the precise backend costs in pmuvm itself, per guest instruction it steps: decoding and
// accounting (Zydis, cache model, predictor) and the LWP model, with LWP off, counting, and
// storing a record on every instruction. The KVM exit that precedes each step is measured by the
// VMM benchmarks on a machine with /dev/kvm; these are the pmuvm-side shares of that budget.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "bench/ratio_reporter.h"
#include "pmu/lwp/lwp_unit.h"
#include "tests/support/recording_interrupt_sink.h"
#include "vmm/precise/step_accountant.h"

namespace {

using namespace pmu;

lwp::Capabilities caps() { return {true, true, true, true, true, 3, 10, true, true, true, 1}; }

// Guest memory as the VMM reaches it: one flat region, bounds check + memcpy (the page walk of
// PagedGuestMemory adds four cached loads per access; the test fake's per-byte map would
// dominate and is not what pmuvm pays).
class FlatMemory : public GuestMemory {
 public:
  static constexpr uint64_t kSize = 4 << 20;
  bool read(uint64_t a, std::span<std::byte> out) override {
    if (a > kSize || out.size() > kSize - a) return false;
    std::memcpy(out.data(), bytes_.data() + a, out.size());
    return true;
  }
  bool write(uint64_t a, std::span<const std::byte> in) override {
    if (a > kSize || in.size() > kSize - a) return false;
    std::memcpy(bytes_.data() + a, in.data(), in.size());
    return true;
  }
  WriteProbe probe_user_write(uint64_t a, uint64_t n) override {
    if (a <= kSize && n <= kSize - a) return {};
    return {WriteFault::kUnreachable, a};
  }
  void poke(uint64_t a, std::span<const std::byte> in) { write(a, in); }
  uint32_t peek_u32(uint64_t a) {
    uint32_t v;
    std::memcpy(&v, bytes_.data() + a, 4);
    return v;
  }
  void poke_u32(uint64_t a, uint32_t v) { std::memcpy(bytes_.data() + a, &v, 4); }

 private:
  std::vector<std::byte> bytes_ = std::vector<std::byte>(kSize);
};

struct LwpRig {
  FlatMemory mem;
  testing::RecordingInterruptSink irq;
  lwp::LwpUnit unit{caps(), {0, 1}, mem, irq};
  // interval 0: LWP off; otherwise instructions-retired every `interval` instructions.
  explicit LwpRig(uint32_t interval) {
    if (interval == 0) return;
    lwp::Lwpcb cb;
    cb.buffer_size = 1 << 20;
    cb.buffer_base = 0x100000;
    cb.slots = {{1, interval, 0}, {2, 1000, 0}, {0, 0, 0}};
    mem.poke(0x10000, lwp::encode_lwpcb(cb));
    unit.write_msr(lwp::kMsrLwpFeatureEnable, 0x7, 0);
    unit.write_msr(lwp::kMsrLwpControlBlock, 0x10000, 3);
  }
};

void retire_loop(benchmark::State& state, uint32_t interval) {
  LwpRig rig(interval);
  RetiredInstruction insn;
  uint64_t n = 0;
  for (auto _ : state) {
    insn.rip = 0x400000 + (n++ & 0xFFF);
    insn.branch.kind = (n & 7) == 0 ? BranchKind::kConditional : BranchKind::kNone;
    rig.unit.retire(insn);
    // Act as the consumer so the buffer never fills: software advances the tail.
    if ((n & 0xFFF) == 0) rig.mem.poke_u32(0x10000 + 20, rig.mem.peek_u32(0x10000 + 16));
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_LwpRetire_Off(benchmark::State& s) { retire_loop(s, 0); }
void BM_LwpRetire_Counting(benchmark::State& s) { retire_loop(s, 100000); }
void BM_LwpRetire_RecordEveryInstruction(benchmark::State& s) { retire_loop(s, 1); }
BENCHMARK(BM_LwpRetire_Off);
BENCHMARK(BM_LwpRetire_Counting);
BENCHMARK(BM_LwpRetire_RecordEveryInstruction);

// A mix like a hot loop: load, add, compare, conditional branch.
void BM_StepAccountant_LoopMix(benchmark::State& state) {
  pmu::cache::Geometry g;
  g.l1d = {32 * 1024, 8, 4};
  g.l2 = {512 * 1024, 8, 12};
  g.l3 = {8 * 1024 * 1024, 16, 40};
  vmm::StepAccountant acc(g);
  const std::vector<std::vector<uint8_t>> code = {
      {0x48, 0x8b, 0x04, 0xcb},  // mov rax, [rbx+rcx*8]
      {0x48, 0x01, 0xc2},        // add rdx, rax
      {0x48, 0xff, 0xc1},        // inc rcx
      {0x48, 0x39, 0xf1},        // cmp rcx, rsi
      {0x75, 0xf1},              // jne loop
  };
  vmm::GuestRegisters r{.rbx = 0x1000000, .rsi = 1 << 20};
  uint64_t i = 0;
  for (auto _ : state) {
    const auto& bytes = code[i % code.size()];
    r.rip = 0x400000 + 4 * (i % code.size());
    r.rcx = i / code.size();
    benchmark::DoNotOptimize(acc.account(r, bytes, 3, r.rip + bytes.size()));
    ++i;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_StepAccountant_LoopMix);

}  // namespace

int main(int argc, char** argv) {
  return pmuvm_bench::run_and_print_ratios(
      argc, argv,
      {
          {"LWP counting vs LWP off (model cost per instruction)",
           {"BM_LwpRetire_Counting", "BM_LwpRetire_Off"}},
          {"record on every instruction vs counting (cost of a store)",
           {"BM_LwpRetire_RecordEveryInstruction", "BM_LwpRetire_Counting"}},
          {"decode+cache+predictor step vs LWP counting",
           {"BM_StepAccountant_LoopMix", "BM_LwpRetire_Counting"}},
      });
}
