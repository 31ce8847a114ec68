// The guest CPUID table (vmm/cpu/cpuid_table.h) built from the shipped profiles over two
// synthetic hosts. Expected words are computed by hand from the proposal's Table 2 (§5.1) and the
// x86 CPUID layouts, never by calling pmu::lwp::cpuid_leaf().
#include "vmm/cpu/cpuid_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <utility>

#include "tests/vmm/profile_text.h"
#include "vmm/cpu/cpu_profile.h"

namespace vmm {
namespace {

using vmm::testing::ProfileWith;

// A recent Intel host as KVM_GET_SUPPORTED_CPUID would describe it: max extended leaf 0x80000008,
// DS and HTT set, architectural perfmon leaf 0xA, KVM's own hypervisor leaves.
std::vector<CpuidEntry> IntelHost() {
  return {
      {0x0, 0, 0, 0x0000000D, 0x756e6547, 0x6c65746e, 0x49656e69},  // GenuineIntel
      {0x1, 0, 0, 0x000906EA, 0x00100800, 0x7FFAFBFF, 0xBFEBFBFF},
      {0x7, 0, kCpuidFlagSignificantIndex, 0, 0x029C6FBF, 0, 0},
      {0xA, 0, 0, 0x07300404, 0, 0, 0x00000603},
      {0xD, 0, kCpuidFlagSignificantIndex, 0x7, 0x340, 0x340, 0},
      {0xD, 1, kCpuidFlagSignificantIndex, 0xF, 0, 0, 0},
      {0x40000000, 0, 0, 0x40000001, 0x4b4d564b, 0x564b4d56, 0x0000004d},  // "KVMKVMKVM"
      {0x40000001, 0, 0, 0x01007AFB, 0, 0, 0},
      {0x80000000, 0, 0, 0x80000008, 0, 0, 0},
      {0x80000001, 0, 0, 0, 0, 0x00000121, 0x2C100800},
      {0x80000002, 0, 0, 0x65746e49, 0x2952286c, 0x726f4320, 0x4d542865},
      {0x80000003, 0, 0, 0x37692029, 0x3037382d, 0x43204b30, 0x40205550},
      {0x80000004, 0, 0, 0x372e3320, 0x7a484730, 0, 0},
      {0x80000008, 0, 0, 0x00003027, 0, 0, 0},
  };
}

// An AMD host that itself has LWP (bit 15) and a non-zero 0x8000001C, max extended 0x8000001E.
std::vector<CpuidEntry> AmdHost() {
  return {
      {0x0, 0, 0, 0x0000000D, 0x68747541, 0x444d4163, 0x69746e65},  // AuthenticAMD
      {0x1, 0, 0, 0x00600F12, 0x00020800, 0x1E98220B, 0x178BFBFF},
      {0x80000000, 0, 0, 0x8000001E, 0x68747541, 0x444d4163, 0x69746e65},
      {0x80000001, 0, 0, 0x00600F12, 0, 0x01C9BFFF, 0x2FD3FBFF},
      {0x8000001C, 0, 0, 0x00000000, 0x01042048, 0x4000000A, 0x0000000F},
  };
}

CpuProfile Builtin(std::string_view name) {
  ProfileResult r = builtin_profile(name);
  EXPECT_TRUE(r.ok()) << r.error;
  return r.ok() ? *r.profile : CpuProfile{};
}

CpuidEntry At(const std::vector<CpuidEntry>& t, uint32_t function, uint32_t index = 0) {
  const CpuidEntry* e = find_cpuid_entry(t, function, index);
  EXPECT_NE(e, nullptr) << std::hex << "no entry 0x" << function << "." << index;
  return e ? *e : CpuidEntry{};
}

std::vector<CpuidEntry> Table(std::string_view profile, const std::vector<CpuidEntry>& host,
                              uint32_t pv = 0) {
  return build_guest_cpuid(host, Builtin(profile), pv);
}

// Table 2 for amd-lwp, policy EN|IRE|BRE|DME|INT:
//   EAX = Enabled(0) | IRE(1) | BRE(2) | DME(3) | Interrupt(31)                 = 0x8000000F
//   EBX = LWPCBSize 40 + 8*3 = 64 (7:0) | EventSize 32 (15:8) | MaxEvents 3 (23:16)
//         | Version 1 (31:24)                                                   = 0x01032040
//   ECX = CacheMax 10 (4:0) | DataAddress (5) | CacheLevels (30) | CacheLatency (31)
//                                                                               = 0xC000002A
//   EDX = Enabled(0) | Interrupt(1) | IRE(2) | BRE(3) | DME(4)                  = 0x0000001F
TEST(CpuidTable, AmdLwpLeaf8000001CExactWords) {
  for (const auto& host : {IntelHost(), AmdHost()}) {
    const CpuidEntry e = At(build_guest_cpuid(host, Builtin("amd-lwp"), 0), 0x8000001C);
    EXPECT_EQ(e.eax, 0x8000000Fu);
    EXPECT_EQ(e.ebx, 0x01032040u);
    EXPECT_EQ(e.ecx, 0xC000002Au);
    EXPECT_EQ(e.edx, 0x0000001Fu);
  }
}

// amd-lwp-lite and the baseline: EAX = EN|IRE = 0x3; EBX = 48 | 32<<8 | 1<<16 | 1<<24 =
// 0x01012030; ECX = CacheMax 10, no flags = 0xA; EDX = Enabled | IRE = 0x5.
TEST(CpuidTable, LiteAndBaselineLeaf8000001C) {
  for (const char* name : {"amd-lwp-lite", "amd-lwp-baseline"}) {
    SCOPED_TRACE(name);
    const CpuidEntry e = At(Table(name, IntelHost()), 0x8000001C);
    EXPECT_EQ(e.eax, 0x00000003u);
    EXPECT_EQ(e.ebx, 0x01012030u);
    EXPECT_EQ(e.ecx, 0x0000000Au);
    EXPECT_EQ(e.edx, 0x00000005u);
  }
}

TEST(CpuidTable, Leaf1FamilyEncoding) {
  // Family 0xF: base family 0xF, extended family 0; model 2, stepping 9.
  EXPECT_EQ(At(Table("intel-netburst", AmdHost()), 1).eax, 0x00000F29u);
  // Family 0x15 = 0xF + 0x6: extended family 6 (27:20); model 0x01, stepping 2.
  EXPECT_EQ(At(Table("amd-lwp", IntelHost()), 1).eax, 0x00600F12u);
  // Model 0x10 on family 0x15: extended model 1 (19:16), base model 0.
  EXPECT_EQ(At(Table("amd-lwp-lite", IntelHost()), 1).eax, 0x00610F01u);
  EXPECT_EQ(encode_cpuid_signature(0x6, 0x3A, 9), 0x000306A9u);  // family 6 uses extended model
  EXPECT_EQ(encode_cpuid_signature(0x5, 0x4, 3), 0x00000543u);
  EXPECT_EQ(encode_cpuid_signature(0x10E, 0xFF, 0xF), 0x0FFF0FFFu);
}

TEST(CpuidTable, Leaf1KeepsTheHostsOtherRegisters) {
  const CpuidEntry e = At(Table("amd-lwp", IntelHost()), 1);
  EXPECT_EQ(e.ebx, 0x00100800u);
  EXPECT_EQ(e.ecx, 0x7FFAFBFFu);
  EXPECT_EQ(e.edx, 0xBFEBFBFFu);
}

TEST(CpuidTable, VendorStringsInLeaf0And80000000) {
  // "AuthenticAMD" in EBX, EDX, ECX order: "Auth" "enti" "cAMD".
  const auto amd = Table("amd-lwp", IntelHost());
  for (uint32_t leaf : {0x0u, 0x80000000u}) {
    const CpuidEntry e = At(amd, leaf);
    EXPECT_EQ(e.ebx, 0x68747541u);
    EXPECT_EQ(e.edx, 0x69746e65u);
    EXPECT_EQ(e.ecx, 0x444d4163u);
  }
  EXPECT_EQ(At(amd, 0).eax, 0xDu);  // the max basic leaf stays the host's
  // "GenuineIntel": "Genu" "ineI" "ntel".
  const auto intel = Table("intel-netburst", AmdHost());
  for (uint32_t leaf : {0x0u, 0x80000000u}) {
    const CpuidEntry e = At(intel, leaf);
    EXPECT_EQ(e.ebx, 0x756e6547u);
    EXPECT_EQ(e.edx, 0x49656e69u);
    EXPECT_EQ(e.ecx, 0x6c65746eu);
  }
}

TEST(CpuidTable, BrandStringLeaves) {
  const auto t = Table("amd-lwp", IntelHost());
  char brand[49] = {};
  for (uint32_t i = 0; i < 3; ++i) {
    const CpuidEntry e = At(t, 0x80000002 + i);
    const uint32_t regs[4] = {e.eax, e.ebx, e.ecx, e.edx};
    std::memcpy(brand + 16 * i, regs, 16);
  }
  EXPECT_STREQ(brand, "pmuvm virtual AMD processor with LWP");
  EXPECT_EQ(brand[47], '\0');
}

TEST(CpuidTable, LwpPresentBitFollowsTheProfile) {
  // Intel host without LWP, profile with: bit 15 set, other bits kept.
  EXPECT_EQ(At(Table("amd-lwp", IntelHost()), 0x80000001).ecx, 0x00000121u | (1u << 15));
  // AMD host with LWP, profile without: bit 15 cleared.
  EXPECT_EQ(At(Table("intel-netburst", AmdHost()), 0x80000001).ecx, 0x01C9BFFFu & ~(1u << 15));
  EXPECT_TRUE(At(Table("amd-lwp-lite", AmdHost()), 0x80000001).ecx & (1u << 15));
}

TEST(CpuidTable, Leaf8000001CIsZeroWithoutLwp) {
  // The AMD host's own (non-zero) LWP leaf must not leak through.
  const auto t = Table("intel-netburst", AmdHost());
  EXPECT_EQ(At(t, 0x8000001C), (CpuidEntry{0x8000001C, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(At(t, 0x80000000).eax, 0x8000001Eu);
  // Beyond the Intel host's max extended leaf it is simply absent (reads as zero).
  const auto u = Table("intel-netburst", IntelHost());
  EXPECT_EQ(find_cpuid_entry(u, 0x8000001C), nullptr);
  EXPECT_EQ(At(u, 0x80000000).eax, 0x80000008u);
}

TEST(CpuidTable, MaxExtendedLeafCoversTheLwpLeaf) {
  EXPECT_EQ(At(Table("amd-lwp", IntelHost()), 0x80000000).eax, 0x8000001Cu);
  EXPECT_EQ(At(Table("amd-lwp", AmdHost()), 0x80000000).eax, 0x8000001Eu);  // never lowered
  // Without LWP it still covers the brand string.
  EXPECT_EQ(At(build_guest_cpuid({}, Builtin("intel-netburst"), 0), 0x80000000).eax, 0x80000004u);
}

TEST(CpuidTable, ParavirtualLeavesReplaceKvms) {
  const auto t = Table("amd-lwp", IntelHost(), 0x5);
  EXPECT_EQ(At(t, 0x40000000), (CpuidEntry{0x40000000, 0, 0, 0x40000001, 0x76756d70, 0x6d, 0}));
  char signature[13] = {};
  const CpuidEntry s = At(t, 0x40000000);
  std::memcpy(signature, &s.ebx, 4);
  std::memcpy(signature + 4, &s.ecx, 4);
  std::memcpy(signature + 8, &s.edx, 4);
  EXPECT_STREQ(signature, "pmuvm");
  // EAX = the VMM's feature bits, EBX = the LWP interrupt vector of the policy.
  EXPECT_EQ(At(t, 0x40000001), (CpuidEntry{0x40000001, 0, 0, 0x5, 0xF0, 0, 0}));
  EXPECT_EQ(At(Table("amd-lwp-lite", IntelHost(), 0), 0x40000001).ebx, 0u);
  size_t hypervisor_leaves = 0;
  for (const CpuidEntry& e : t) hypervisor_leaves += e.function >> 28 == 0x4;
  EXPECT_EQ(hypervisor_leaves, 2u);
}

TEST(CpuidTable, NetburstOverridesClearDsHttAndPerfmonLeaf) {
  const auto t = Table("intel-netburst", IntelHost());
  EXPECT_EQ(At(t, 1).edx, 0xBFEBFBFFu & ~((1u << 21) | (1u << 28)));
  EXPECT_EQ(At(t, 1).ecx, 0x7FFAFBFFu & ~((1u << 2) | (1u << 15)));
  EXPECT_EQ(At(t, 0xA), (CpuidEntry{0xA, 0, 0, 0, 0, 0, 0}));
}

TEST(CpuidTable, OverridesApplyLastCreateLeavesAndRespectSubleaves) {
  ProfileResult r = parse_profile(
      ProfileWith({
          "  \"lwp\": {\"interrupt\": true, \"events\": [\"IRE\"], \"max_events\": 1},",
          "  \"cpuid_overrides\": [",
          "    {\"leaf\": \"0x8000001C\", \"register\": \"edx\", \"clear\": \"0x2\"},",
          "    {\"leaf\": \"0x12345\", \"register\": \"eax\", \"set\": 1},",
          "    {\"leaf\": \"0xD\", \"subleaf\": 1, \"register\": \"eax\", \"clear\": \"0x8\"},",
          "    {\"leaf\": \"0xD\", \"subleaf\": 5, \"register\": \"ebx\", \"set\": \"0x40\"},",
          "    {\"leaf\": \"0x40000000\", \"register\": \"edx\", \"set\": \"0x1\"}",
          "  ],",
      }),
      "t.json");
  ASSERT_TRUE(r.ok()) << r.error;
  const auto t = build_guest_cpuid(IntelHost(), *r.profile, 0);
  // The LWP leaf says EDX = Enabled|Interrupt|IRE = 0x7; the override removes Interrupt.
  EXPECT_EQ(At(t, 0x8000001C).edx, 0x5u);
  EXPECT_EQ(At(t, 0x12345), (CpuidEntry{0x12345, 0, 0, 1, 0, 0, 0}));
  EXPECT_EQ(At(t, 0xD, 0).eax, 0x7u);  // other subleaf untouched
  EXPECT_EQ(At(t, 0xD, 1).eax, 0x7u);
  EXPECT_EQ(At(t, 0xD, 5), (CpuidEntry{0xD, 5, kCpuidFlagSignificantIndex, 0, 0x40, 0, 0}));
  EXPECT_EQ(At(t, 0x40000000).edx, 0x1u);
}

TEST(CpuidTable, SortedUniqueAndOtherwiseTheHosts) {
  const auto t = Table("amd-lwp", IntelHost());
  std::set<std::pair<uint32_t, uint32_t>> keys;
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_TRUE(keys.insert({t[i].function, t[i].index}).second) << "duplicate entry";
    if (i > 0) {
      EXPECT_LE(t[i - 1].function, t[i].function);
    }
  }
  EXPECT_EQ(At(t, 0x7), IntelHost()[2]);
  EXPECT_EQ(At(t, 0x80000008), IntelHost()[13]);
}

}  // namespace
}  // namespace vmm
