// A vCPU's PMU (VcpuPmu) over real guest page tables: LLWPCB through a trapped WRMSR reaches
// the LWPCB by linear address in the vCPU's address space, supervisor-only memory is refused
// (#GP, nothing written), and a snapshot restored into a fresh one continues identically.
#include "vmm/vpmu/vcpu_pmu.h"

#include <gtest/gtest.h>

#include "pmu/lwp/lwpcb.h"
#include "tests/support/recording_interrupt_sink.h"

namespace vmm {
namespace {

constexpr uint64_t kCr3 = 0x1000;
constexpr uint64_t kLwpcb = 0x600000, kBuffer = 0x601000;
constexpr uint64_t P = 1, W = 2, U = 4, PS = 0x80;

class VcpuPmuTest : public ::testing::Test {
 protected:
  VcpuPmuTest() : ram_(16 << 20) {
    // PML4[0] -> PDPT -> PD; PD[3] = 2 MiB user page at linear 0x600000 -> physical 0xA00000.
    ram_.write_u64(kCr3, 0x2000 | P | W | U);
    ram_.write_u64(0x2000, 0x3000 | P | W | U);
    ram_.write_u64(0x3000 + 3 * 8, 0xA00000 | P | W | U | PS);
    ram_.write_u64(0x3000 + 4 * 8, 0xC00000 | P | W | PS);  // 0x800000: supervisor only
    caps_ = pmu::lwp::Capabilities{true, true, true, true, true, 3, 10, true, true, true, 1};
  }
  void write_lwpcb(uint64_t phys, uint64_t buffer_linear) {
    pmu::lwp::Lwpcb cb;
    cb.buffer_size = 32 * 16;
    cb.buffer_base = buffer_linear;
    cb.slots = {{1, 5, 0}, {0, 0, 0}, {0, 0, 0}};
    auto bytes = pmu::lwp::encode_lwpcb(cb);
    ASSERT_TRUE(ram_.write(phys, bytes));
  }
  uint32_t u32(uint64_t phys) {
    uint64_t v = 0;
    ram_.read_u64(phys, v);
    return static_cast<uint32_t>(v);
  }
  void run_instructions(VcpuPmu& b, int n, uint64_t rip) {
    for (int i = 0; i < n; ++i) {
      pmu::RetiredInstruction insn;
      insn.rip = rip + i;
      b.retire(insn, kCr3);
    }
  }

  GuestRam ram_;
  pmu::lwp::Capabilities caps_;
  pmu::testing::RecordingInterruptSink irq_;
};

TEST_F(VcpuPmuTest, LlwpcbThroughGuestPageTables) {
  write_lwpcb(0xA00000, kBuffer);
  VcpuPmu b(0, 0, caps_, 1, ram_, irq_);
  EXPECT_TRUE(b.write_msr(pmu::lwp::kMsrLwpFeatureEnable, 0x7, 0, kCr3).handled);
  MsrOutcome w = b.write_msr(pmu::lwp::kMsrLwpControlBlock, kLwpcb, 3, kCr3);
  ASSERT_TRUE(w.handled);
  ASSERT_FALSE(w.general_protection);
  EXPECT_EQ(u32(0xA00000), 0x3u);  // Flags: EN | IRE, written through the page tables
  run_instructions(b, 10, 0x400000);
  MsrOutcome r = b.read_msr(pmu::lwp::kMsrLwpControlBlock, 3, kCr3);
  EXPECT_EQ(r.value, kLwpcb);
  EXPECT_EQ(u32(0xA00000 + 16), 64u);  // two records stored, head flushed by SLWPCB
  uint64_t rip = 0;
  ram_.read_u64(0xA01000 + 8, rip);
  EXPECT_EQ(rip, 0x400004u);
}

TEST_F(VcpuPmuTest, SupervisorOnlyLwpcbIsGeneralProtection) {
  write_lwpcb(0xC00000, kBuffer);
  VcpuPmu b(0, 0, caps_, 1, ram_, irq_);
  b.write_msr(pmu::lwp::kMsrLwpFeatureEnable, 0x7, 0, kCr3);
  MsrOutcome w = b.write_msr(pmu::lwp::kMsrLwpControlBlock, 0x800000, 3, kCr3);
  EXPECT_TRUE(w.general_protection);
  EXPECT_EQ(u32(0xC00000), 0u);  // Flags untouched
}

TEST_F(VcpuPmuTest, OtherMsrsAreNotHandled) {
  VcpuPmu b(0, 0, caps_, 1, ram_, irq_);
  EXPECT_FALSE(b.read_msr(0x10, 0, kCr3).handled);
  EXPECT_FALSE(b.write_msr(0x1A0, 0, 0, kCr3).handled);
}

TEST_F(VcpuPmuTest, SnapshotContinuesIdentically) {
  write_lwpcb(0xA00000, kBuffer);
  VcpuPmu a(0, 0, caps_, 7, ram_, irq_);
  a.write_msr(pmu::lwp::kMsrLwpFeatureEnable, 0x7, 0, kCr3);
  a.write_msr(pmu::lwp::kMsrLwpControlBlock, kLwpcb, 3, kCr3);
  run_instructions(a, 7, 0x400000);
  const uint64_t generation = a.generation();
  std::vector<std::byte> snapshot = a.save_state();
  EXPECT_EQ(a.generation(), generation) << "saving changes nothing";

  VcpuPmu b(0, 0, caps_, 999, ram_, irq_);
  ASSERT_TRUE(b.restore_state(snapshot).ok());
  b.enter_user(kCr3);
  run_instructions(b, 8, 0x400007);  // 15 in all: records at instructions 5, 10, 15
  EXPECT_EQ(b.read_msr(pmu::lwp::kMsrLwpControlBlock, 3, kCr3).value, kLwpcb);
  EXPECT_EQ(u32(0xA00000 + 16), 96u);
  uint64_t rip = 0;
  ram_.read_u64(0xA01000 + 64 + 8, rip);
  EXPECT_EQ(rip, 0x40000Eu);
}

TEST_F(VcpuPmuTest, NetburstMsrsRouteOnlyWhenTheProfileHasThePmu) {
  VcpuPmu without(0, 0, caps_, 1, ram_, irq_);
  EXPECT_FALSE(without.read_msr(0x300, 0, kCr3).handled) << "no NetBurst PMU: KVM's behaviour";
  VcpuPmu with(0, 0, caps_, 1, ram_, irq_, pmu::netburst::Config{});
  MsrOutcome w = with.write_msr(0x300, 0xFFFFFFFFFFFFFF00ull, 0, kCr3);  // counter 0, -256
  ASSERT_TRUE(w.handled);
  EXPECT_FALSE(w.general_protection);
  MsrOutcome r = with.read_msr(0x300, 0, kCr3);
  EXPECT_EQ(r.value, 0xFFFFFFFF00ull) << "40-bit counter";
  EXPECT_TRUE(with.read_msr(0x3BF, 0, kCr3).general_protection) << "no ESCR at 0x3BF";
  EXPECT_TRUE(with.read_msr(pmu::lwp::kMsrLwpFeatureEnable, 0, kCr3).handled) << "LWP still routed";
  EXPECT_FALSE(with.wants_events());
}

TEST_F(VcpuPmuTest, ArchitecturalPmuMsrsRouteOnlyWhenTheProfileHasThePmu) {
  VcpuPmu without(0, 0, caps_, 1, ram_, irq_);
  EXPECT_FALSE(without.read_msr(0x38F, 0, kCr3).handled) << "no architectural PMU: KVM's";
  EXPECT_FALSE(without.arch_pmu_state());
  VcpuPmu with(0, 0, caps_, 1, ram_, irq_, std::nullopt, nullptr, pmu::arch_perfmon::Config{});
  // IA32_PERFEVTSEL0 = INST_RETIRED.ANY_P, USR, EN, INT; IA32_PMC0 = -3 (a 32-bit write).
  ASSERT_FALSE(with.write_msr(0x186, 0x5100C0, 0, kCr3).general_protection);
  ASSERT_FALSE(with.write_msr(0xC1, 0xFFFFFFFD, 0, kCr3).general_protection);
  EXPECT_EQ(with.read_msr(0xC1, 0, kCr3).value, (1ull << 48) - 3) << "48-bit counter";
  EXPECT_TRUE(with.write_msr(0x38E, 0, 0, kCr3).general_protection) << "GLOBAL_STATUS is RO";
  EXPECT_TRUE(with.read_msr(pmu::lwp::kMsrLwpFeatureEnable, 0, kCr3).handled) << "LWP still routed";
  EXPECT_TRUE(with.wants_events());
  EXPECT_FALSE(with.wants_kernel_events());
  EXPECT_EQ(with.quiet_retirements(), 3u);
  run_instructions(with, 3, 0x400000);
  EXPECT_EQ(irq_.pmis, 1) << "the third instruction overflows the counter";
  EXPECT_EQ(with.read_msr(0x38E, 0, kCr3).value, 1u);
  // A snapshot of it continues in a fresh block; a block without the PMU refuses the state.
  const std::optional<pmu::arch_perfmon::ArchPmuState> saved = with.arch_pmu_state();
  ASSERT_TRUE(saved);
  VcpuPmu fresh(0, 0, caps_, 1, ram_, irq_, std::nullopt, nullptr, pmu::arch_perfmon::Config{});
  ASSERT_TRUE(fresh.restore_arch_pmu_state(&*saved).ok());
  EXPECT_EQ(fresh.read_msr(0x38E, 0, kCr3).value, 1u);
  EXPECT_FALSE(fresh.restore_arch_pmu_state(nullptr).ok());
  const Status refused = without.restore_arch_pmu_state(&*saved);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message,
            "architectural PMU state, but the CPU profile has no architectural PMU");
  EXPECT_THROW(VcpuPmu(0, 0, caps_, 1, ram_, irq_, pmu::netburst::Config{}, nullptr,
                       pmu::arch_perfmon::Config{}),
               std::invalid_argument);
}

// PEBS writes its record into the kernel's DS buffer (supervisor-only memory, which LWP may
// not write) through the vCPU's page tables, with the registers the VMM hands it; without a way
// to read them the block is not built.
TEST_F(VcpuPmuTest, PebsRecordsGoThroughPageTablesIntoSupervisorMemory) {
  pmu::arch_perfmon::Config c;
  c.pebs = true;
  EXPECT_THROW(VcpuPmu(0, 0, caps_, 1, ram_, irq_, std::nullopt, nullptr, c),
               std::invalid_argument);
  int register_reads = 0;
  VcpuPmu with(0, 0, caps_, 1, ram_, irq_, std::nullopt, nullptr, c, [&] {
    ++register_reads;
    pmu::arch_perfmon::PebsRegisters r;
    r.rip = 0x400001;
    r.rax = 0xAA;
    return r;
  });
  // DS area at linear 0x800000 (physical 0xC00000), its buffer 0x1000 further: one record, the
  // interrupt at the first. PMC0 = -2 counting user instructions with PEBS.
  const uint64_t ds = 0x800000, buffer = 0x801000;
  ram_.write_u64(0xC00000 + 0x20, buffer);
  ram_.write_u64(0xC00000 + 0x28, buffer);
  ram_.write_u64(0xC00000 + 0x30, buffer + 0xC8);
  ram_.write_u64(0xC00000 + 0x38, buffer + 0xC8);
  ASSERT_FALSE(with.write_msr(0x600, ds, 0, kCr3).general_protection);
  ASSERT_FALSE(with.write_msr(0x186, 0x4100C0, 0, kCr3).general_protection);  // EN USR, no INT
  ASSERT_FALSE(with.write_msr(0xC1, 0xFFFFFFFE, 0, kCr3).general_protection);
  ASSERT_FALSE(with.write_msr(0x3F1, 1, 0, kCr3).general_protection);
  run_instructions(with, 2, 0x400000);
  EXPECT_EQ(register_reads, 1);
  EXPECT_EQ(irq_.pmis, 1);
  uint64_t v = 0;
  ASSERT_TRUE(ram_.read_u64(0xC00000 + 0x28, v));
  EXPECT_EQ(v, buffer + 0xC8) << "index advanced by one record";
  ASSERT_TRUE(ram_.read_u64(0xC01000 + 0x08, v));
  EXPECT_EQ(v, 0x400001u) << "RIP after";
  ASSERT_TRUE(ram_.read_u64(0xC01000 + 0x10, v));
  EXPECT_EQ(v, 0xAAu) << "RAX";
  ASSERT_TRUE(ram_.read_u64(0xC01000 + 0xB0, v));
  EXPECT_EQ(v, 0x400001u) << "eventing IP: the second instruction";
  EXPECT_EQ(with.read_msr(0x38E, 0, kCr3).value, 1ull << 62) << "OvfBuf only";
}

TEST_F(VcpuPmuTest, CorruptSnapshotIsRejectedWithReason) {
  VcpuPmu b(0, 0, caps_, 1, ram_, irq_);
  std::vector<std::byte> junk(10, std::byte{0x42});
  const Status restored = b.restore_state(junk);
  ASSERT_FALSE(restored.ok());
  EXPECT_EQ(restored.error().message, "not an LWP save area (bad magic)");
}

}  // namespace
}  // namespace vmm
