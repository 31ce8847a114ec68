// The guest CPUID table (vmm/cpu/cpuid_table.h) built from the shipped profiles over two
// synthetic KVM-supported tables, a rich and a poor one: the guest's table is the profile's and
// never the host's. Expected words are computed by hand from the proposal's Table 2 (§5.1) and the
// x86 CPUID layouts, never by calling pmu::lwp::cpuid_leaf().
#include "vmm/cpu/cpuid_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <utility>

#include "tests/cpu/builtin_profile.h"
#include "tests/cpu/profile_text.h"
#include "vmm/cpu/cpu_profile.h"
#include "vmm/cpu/cpuid_features.h"

namespace vmm {
namespace {

using vmm::testing::Builtin;
using vmm::testing::ProfileWith;

// A rich modern host as KVM_GET_SUPPORTED_CPUID would describe it: every feature bit offered
// (AVX, x2APIC, DS, HTT, ...), the architectural perfmon leaf 0xA, topology leaf 0xB, XSAVE leaf
// 0xD, KVM's own hypervisor leaves, an LWP leaf of its own, 48/57-bit addresses.
std::vector<CpuidEntry> RichHost() {
  return {
      {0x0, 0, 0, 0x0000001F, 0x756e6547, 0x6c65746e, 0x49656e69},  // GenuineIntel
      {0x1, 0, 0, 0x000906EA, 0x00100800, 0xFFFFFFFF, 0xFFFFFFFF},
      {0x7, 0, kCpuidFlagSignificantIndex, 0, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF},
      {0xA, 0, 0, 0x07300404, 0, 0, 0x00000603},
      {0xB, 0, kCpuidFlagSignificantIndex, 1, 2, 0x100, 0},
      {0xD, 0, kCpuidFlagSignificantIndex, 0x7, 0x340, 0x340, 0},
      {0xD, 1, kCpuidFlagSignificantIndex, 0xF, 0, 0, 0},
      {0x40000000, 0, 0, 0x40000001, 0x4b4d564b, 0x564b4d56, 0x0000004d},  // "KVMKVMKVM"
      {0x40000001, 0, 0, 0x01007AFB, 0, 0, 0},
      {0x80000000, 0, 0, 0x80000021, 0, 0, 0},
      {0x80000001, 0, 0, 0, 0, 0xFFFFFFFF, 0xFFFFFFFF},
      {0x80000002, 0, 0, 0x65746e49, 0x2952286c, 0x726f4320, 0x4d542865},
      {0x80000007, 0, 0, 0, 0, 0, 0xFFFFFFFF},
      {0x80000008, 0, 0, 0x00003934, 0, 0, 0},
      {0x8000001C, 0, 0, 0x00000000, 0x01042048, 0x4000000A, 0x0000000F},
  };
}

// A poor host: what KVM offers inside QEMU's qemu64 CPU (the nested host of DESIGN §3): SSE3 and
// CX16 only in CPUID 1 ECX, no VME/SS, LAHF/SVM in 0x80000001 ECX, SYSCALL NX LM in its EDX, 40
// physical address bits, no leaf 7.
std::vector<CpuidEntry> PoorHost() {
  return {
      {0x0, 0, 0, 0x0000000D, 0x68747541, 0x444d4163, 0x69746e65},  // AuthenticAMD
      {0x1, 0, 0, 0x00000663, 0x00000800, 0x00002001, 0x078BFBFD},
      {0x80000000, 0, 0, 0x80000008, 0x68747541, 0x444d4163, 0x69746e65},
      {0x80000001, 0, 0, 0x00000663, 0, 0x00000005, 0x20100800},
      {0x80000008, 0, 0, 0x00003028, 0, 0, 0},
  };
}

const char* const kShipped[] = {"amd-lwp", "amd-lwp-lite", "amd-lwp-baseline", "intel-netburst"};

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
  for (const auto& host : {RichHost(), PoorHost()}) {
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
    const CpuidEntry e = At(Table(name, RichHost()), 0x8000001C);
    EXPECT_EQ(e.eax, 0x00000003u);
    EXPECT_EQ(e.ebx, 0x01012030u);
    EXPECT_EQ(e.ecx, 0x0000000Au);
    EXPECT_EQ(e.edx, 0x00000005u);
  }
}

// Bits that a profile's features may put into (leaf, register): the union over its names.
uint32_t ProfileBits(const CpuProfile& p, uint32_t leaf, CpuidRegister r) {
  uint32_t bits = 0;
  for (const std::string& name : p.features) {
    const CpuidFeature* f = find_cpuid_feature(name);
    if (f != nullptr && f->leaf == leaf && f->reg == r) bits |= 1u << f->bit;
  }
  return bits;
}

uint32_t Reg(const CpuidEntry& e, CpuidRegister r) {
  switch (r) {
    case CpuidRegister::kEax: return e.eax;
    case CpuidRegister::kEbx: return e.ebx;
    case CpuidRegister::kEcx: return e.ecx;
    case CpuidRegister::kEdx: return e.edx;
  }
  return 0;
}

// The profile's own table with `dropped` features cleared: what a host lacking them must give.
std::vector<CpuidEntry> WithoutFeatures(std::vector<CpuidEntry> t,
                                        const std::vector<std::string>& dropped) {
  for (const std::string& name : dropped) {
    const CpuidFeature* f = find_cpuid_feature(name);
    if (f == nullptr) continue;  // an address-size clamp, compared separately
    for (CpuidEntry& e : t) {
      if (e.function != f->leaf || e.index != f->subleaf) continue;
      uint32_t* r[] = {&e.eax, &e.ebx, &e.ecx, &e.edx};
      *r[static_cast<int>(f->reg)] &= ~(1u << f->bit);
    }
    // AMD repeats CPUID 1 EDX in 0x80000001 EDX.
    if (f->leaf == 1 && f->reg == CpuidRegister::kEdx)
      for (CpuidEntry& e : t)
        if (e.function == 0x80000001) e.edx &= ~(1u << f->bit);
  }
  return t;
}

TEST(CpuidTable, EveryShippedProfileIsTheSameOnARichAndAPoorHost) {
  for (const char* name : kShipped) {
    SCOPED_TRACE(name);
    const CpuProfile p = Builtin(name);
    const std::vector<CpuidEntry> defined = profile_cpuid(p, 0);
    // The rich host offers everything: the guest sees exactly the profile's definition.
    const GuestCpuid rich = filter_guest_cpuid(RichHost(), p, 0);
    EXPECT_EQ(rich.entries, defined);
    EXPECT_THAT(rich.dropped, ::testing::IsEmpty());
    // The poor host: the same table minus what it lacks, each loss reported.
    const GuestCpuid poor = filter_guest_cpuid(PoorHost(), p, 0);
    std::vector<std::string> expected_dropped;
    for (const std::string& f : p.features) {
      const CpuidFeature* feature = find_cpuid_feature(f);
      ASSERT_NE(feature, nullptr) << f;
      const CpuidEntry* offered = find_cpuid_entry(PoorHost(), feature->leaf, feature->subleaf);
      if (!feature->emulated_by_pmuvm &&
          !(offered && (Reg(*offered, feature->reg) & (1u << feature->bit))))
        expected_dropped.push_back(f);
    }
    std::vector<std::string> dropped_features;
    for (const std::string& d : poor.dropped)
      if (find_cpuid_feature(d) != nullptr) dropped_features.push_back(d);
    EXPECT_EQ(dropped_features, expected_dropped);
    std::vector<CpuidEntry> expected = WithoutFeatures(defined, poor.dropped);
    if (p.address_sizes && p.address_sizes->physical > 40) {
      EXPECT_THAT(poor.dropped,
                  ::testing::Contains("address_sizes.physical " +
                                      std::to_string(p.address_sizes->physical) + " -> 40"));
      for (CpuidEntry& e : expected)
        if (e.function == 0x80000008) e.eax = (e.eax & ~0xFFu) | 40;
    }
    EXPECT_EQ(poor.entries, expected);
  }
}

TEST(CpuidTable, NoHostOnlyBitOrLeafReachesTheGuest) {
  for (const char* name : kShipped) {
    SCOPED_TRACE(name);
    const CpuProfile p = Builtin(name);
    const std::vector<CpuidEntry> t = Table(name, RichHost());
    for (const auto& [leaf, r] :
         std::vector<std::pair<uint32_t, CpuidRegister>>{{1, CpuidRegister::kEcx},
                                                         {1, CpuidRegister::kEdx},
                                                         {7, CpuidRegister::kEbx},
                                                         {7, CpuidRegister::kEcx},
                                                         {7, CpuidRegister::kEdx},
                                                         {0x80000001, CpuidRegister::kEcx},
                                                         {0x80000001, CpuidRegister::kEdx},
                                                         {0x80000007, CpuidRegister::kEdx}}) {
      const CpuidEntry* e = find_cpuid_entry(t, leaf, 0);
      if (e == nullptr) continue;
      uint32_t allowed = ProfileBits(p, leaf, r);
      if (leaf == 0x80000001 && r == CpuidRegister::kEcx && p.lwp.available) allowed |= 1u << 15;
      if (leaf == 0x80000001 && r == CpuidRegister::kEdx)
        allowed |= ProfileBits(p, 1, CpuidRegister::kEdx);  // AMD's mirror of CPUID 1 EDX
      EXPECT_EQ(Reg(*e, r) & ~allowed, 0u) << std::hex << "leaf 0x" << leaf << " reg " << int(r);
    }
    for (const CpuidEntry& e : t) {
      EXPECT_NE(e.function, 0xAu) << "the host's perfmon leaf";
      EXPECT_NE(e.function, 0xBu) << "the host's topology leaf";
      EXPECT_NE(e.function, 0xDu) << "the host's XSAVE leaf";
      if (e.function < 0x80000000)
        EXPECT_LE(e.function >= 0x40000000 ? 0 : e.function, p.max_basic_leaf);
      else
        EXPECT_LE(e.function, p.max_extended_leaf);
    }
    EXPECT_EQ(At(t, 0).eax, p.max_basic_leaf);
    EXPECT_EQ(At(t, 0x80000000).eax, p.max_extended_leaf);
    EXPECT_EQ(At(t, 1).ecx & (1u << 21), 0u) << "x2APIC";
    EXPECT_EQ(At(t, 1).ecx & ((1u << 26) | (1u << 28)), 0u) << "XSAVE/AVX";
    EXPECT_EQ(At(t, 1).edx & (1u << 28), 0u) << "HTT";
    EXPECT_EQ((At(t, 1).ebx >> 16) & 0xFF, 1u) << "one logical processor";
    EXPECT_TRUE(At(t, 0x80000001).edx & (1u << 29)) << "LM: a 64-bit guest";
    EXPECT_TRUE(At(t, 0x80000001).edx & (1u << 20)) << "NX";
    EXPECT_EQ(At(t, 0x80000001).ecx & (1u << 2), 0u) << "SVM";
  }
}

TEST(CpuidTable, IntelNetburstIsAPrescottWithTheP4Pmu) {
  for (const auto& host : {RichHost(), PoorHost()}) {
    const auto t = Table("intel-netburst", host);
    EXPECT_EQ(At(t, 0).eax, 0x5u);         // below 0xA: no architectural perfmon, Linux takes p4.c
    EXPECT_EQ(At(t, 1).eax, 0x00000F43u);  // family 0xF model 4 stepping 3
    EXPECT_EQ(find_cpuid_entry(t, 0xA), nullptr);
    const uint32_t edx = At(t, 1).edx;
    EXPECT_EQ(edx & ((1u << 21) | (1u << 28)), 0u) << "no DS (PEBS/BTS), no HTT";
    EXPECT_EQ(At(t, 1).ecx & ((1u << 2) | (1u << 15) | (1u << 3)), 0u) << "no DTES64 PDCM MONITOR";
    EXPECT_EQ(At(t, 1).ebx, (8u << 8) | (1u << 16)) << "CLFLUSH 64 bytes, 1 logical processor";
    EXPECT_EQ(At(t, 0x80000001).edx, (1u << 11) | (1u << 20) | (1u << 29)) << "SYSCALL NX LM";
    EXPECT_EQ(At(t, 0x80000001).eax, 0u);
    EXPECT_EQ(At(t, 0x80000008).eax, 0x3024u);  // 36 physical, 48 linear
  }
  const auto t = Table("intel-netburst", RichHost());
  EXPECT_EQ(At(t, 1).edx, 0x0F8BFBFFu);  // FPU..SSE2, SS; no PSN, DS, ACPI, HTT, TM, PBE
  EXPECT_EQ(At(t, 1).ecx, 0x80002001u);  // SSE3, CX16, hypervisor
  // Caches from the profile: CPUID 2 descriptors 0x60 (16 KiB 8-way L1D), 0x7D (2 MiB 8-way L2),
  // 0x40 (no L3); CPUID 4 L1D and L2, then the null subleaf.
  EXPECT_EQ(At(t, 2), (CpuidEntry{2, 0, 0, 0x407D6001u, 0, 0, 0}));
  EXPECT_EQ(At(t, 4, 0),
            (CpuidEntry{4, 0, kCpuidFlagSignificantIndex, 0x121, (7u << 22) | 63, 31, 0}));
  EXPECT_EQ(At(t, 4, 1),
            (CpuidEntry{4, 1, kCpuidFlagSignificantIndex, 0x143, (7u << 22) | 63, 4095, 0}));
  EXPECT_EQ(At(t, 4, 2), (CpuidEntry{4, 2, kCpuidFlagSignificantIndex, 0, 0, 0, 0}));
  EXPECT_EQ(At(t, 0x80000006).ecx, (2048u << 16) | (0x6u << 12) | 64);
}

TEST(CpuidTable, AmdProfilesAreFamily15h) {
  const auto t = Table("amd-lwp", RichHost());
  EXPECT_EQ(At(t, 0).eax, 0xDu);
  EXPECT_EQ(At(t, 0x80000000).eax, 0x8000001Eu);
  EXPECT_EQ(At(t, 0x80000001).eax, 0x00600F12u);  // AMD repeats the signature
  // CPUID 1 EDX bits 0-9, 12-17, 23, 24 repeated in 0x80000001 EDX, plus SYSCALL MMXEXT FXSR_OPT
  // PDPE1GB RDTSCP LM and NX.
  EXPECT_EQ(At(t, 0x80000001).edx, (At(t, 1).edx & 0x0183F3FFu) | 0x2ED00800u);
  EXPECT_TRUE(At(t, 0x80000001).ecx & (1u << 15)) << "LWP";
  // L1D 16 KiB 4-way, L2 2 MiB 16-way, L3 8 MiB 64-way, 64-byte lines.
  EXPECT_EQ(At(t, 0x80000005).ecx, 0x10040140u);
  EXPECT_EQ(At(t, 0x80000005).edx, 0x10040140u);  // L1I as L1D: never 0 (Linux divides by its ways)
  EXPECT_EQ(At(t, 0x80000006).ecx, 0x08008140u);
  EXPECT_EQ(At(t, 0x80000006).edx, 0x0040C140u);
  EXPECT_EQ(At(t, 0x80000008).eax, 0x3030u);
  EXPECT_EQ(find_cpuid_entry(t, 2), nullptr) << "Intel's descriptor leaf";
  EXPECT_EQ(find_cpuid_entry(t, 4), nullptr) << "Intel's cache leaf";
  EXPECT_EQ(At(Table("amd-lwp-lite", RichHost()), 0x80000006).edx, 0u) << "no L3";
}

TEST(CpuidTable, DroppedFeaturesAreLoggedByBuildGuestCpuid) {
  // build_guest_cpuid() is filter_guest_cpuid() plus one warning line; the table is the same.
  EXPECT_EQ(build_guest_cpuid(PoorHost(), Builtin("amd-lwp"), 0),
            filter_guest_cpuid(PoorHost(), Builtin("amd-lwp"), 0).entries);
  const GuestCpuid g = filter_guest_cpuid(PoorHost(), Builtin("amd-lwp"), 0);
  EXPECT_THAT(g.dropped, ::testing::Contains("sse4_2"));
  EXPECT_THAT(g.dropped, ::testing::Not(::testing::Contains("hypervisor")));  // pmuvm's own
  EXPECT_TRUE(At(g.entries, 1).ecx & (1u << 31));
  EXPECT_TRUE(At(g.entries, 0x80000001).ecx & (1u << 15)) << "LWP is pmuvm's, never dropped";
}

TEST(CpuidTable, PerVcpuApicIdIsPatched) {
  const auto t = Table("intel-netburst", RichHost());
  for (uint32_t i : {0u, 1u, 7u}) {
    const auto own = cpuid_for_vcpu(t, i);
    EXPECT_EQ(At(own, 1).ebx >> 24, i);
    EXPECT_EQ(At(own, 1).ebx & 0x00FFFFFFu, At(t, 1).ebx & 0x00FFFFFFu);
  }
}

TEST(CpuidTable, Leaf1FamilyEncoding) {
  // Family 0xF: base family 0xF, extended family 0; model 4, stepping 3.
  EXPECT_EQ(At(Table("intel-netburst", PoorHost()), 1).eax, 0x00000F43u);
  // Family 0x15 = 0xF + 0x6: extended family 6 (27:20); model 0x01, stepping 2.
  EXPECT_EQ(At(Table("amd-lwp", RichHost()), 1).eax, 0x00600F12u);
  // Model 0x10 on family 0x15: extended model 1 (19:16), base model 0.
  EXPECT_EQ(At(Table("amd-lwp-lite", RichHost()), 1).eax, 0x00610F01u);
  EXPECT_EQ(encode_cpuid_signature(0x6, 0x3A, 9), 0x000306A9u);  // family 6 uses extended model
  EXPECT_EQ(encode_cpuid_signature(0x5, 0x4, 3), 0x00000543u);
  EXPECT_EQ(encode_cpuid_signature(0x10E, 0xFF, 0xF), 0x0FFF0FFFu);
}

TEST(CpuidTable, VendorStringsInLeaf0And80000000) {
  // "AuthenticAMD" in EBX, EDX, ECX order: "Auth" "enti" "cAMD"; AMD repeats it in 0x80000000.
  const auto amd = Table("amd-lwp", RichHost());
  for (uint32_t leaf : {0x0u, 0x80000000u}) {
    const CpuidEntry e = At(amd, leaf);
    EXPECT_EQ(e.ebx, 0x68747541u);
    EXPECT_EQ(e.edx, 0x69746e65u);
    EXPECT_EQ(e.ecx, 0x444d4163u);
  }
  // "GenuineIntel": "Genu" "ineI" "ntel"; Intel's 0x80000000 EBX/ECX/EDX are zero.
  const auto intel = Table("intel-netburst", PoorHost());
  EXPECT_EQ(At(intel, 0).ebx, 0x756e6547u);
  EXPECT_EQ(At(intel, 0).edx, 0x49656e69u);
  EXPECT_EQ(At(intel, 0).ecx, 0x6c65746eu);
  EXPECT_EQ(At(intel, 0x80000000), (CpuidEntry{0x80000000, 0, 0, 0x80000008, 0, 0, 0}));
}

TEST(CpuidTable, BrandStringLeaves) {
  const auto t = Table("amd-lwp", RichHost());
  char brand[49] = {};
  for (uint32_t i = 0; i < 3; ++i) {
    const CpuidEntry e = At(t, 0x80000002 + i);
    const uint32_t regs[4] = {e.eax, e.ebx, e.ecx, e.edx};
    std::memcpy(brand + 16 * i, regs, 16);
  }
  EXPECT_STREQ(brand, "pmuvm virtual AMD processor with LWP");
  EXPECT_EQ(brand[47], '\0');
}

TEST(CpuidTable, LwpLeafOnlyWithLwp) {
  // The rich host's own (non-zero) LWP leaf and bit 15 never leak through.
  const auto t = Table("intel-netburst", RichHost());
  EXPECT_EQ(find_cpuid_entry(t, 0x8000001C), nullptr);
  EXPECT_EQ(At(t, 0x80000001).ecx & (1u << 15), 0u);
  EXPECT_TRUE(At(Table("amd-lwp-lite", PoorHost()), 0x80000001).ecx & (1u << 15));
}

TEST(CpuidTable, ParavirtualLeavesReplaceKvms) {
  const auto t = Table("amd-lwp", RichHost(), 0x5);
  EXPECT_EQ(At(t, 0x40000000), (CpuidEntry{0x40000000, 0, 0, 0x40000001, 0x76756d70, 0x6d, 0}));
  char signature[13] = {};
  const CpuidEntry s = At(t, 0x40000000);
  std::memcpy(signature, &s.ebx, 4);
  std::memcpy(signature + 4, &s.ecx, 4);
  std::memcpy(signature + 8, &s.edx, 4);
  EXPECT_STREQ(signature, "pmuvm");
  // EAX = the VMM's feature bits, EBX = the LWP interrupt vector of the policy.
  EXPECT_EQ(At(t, 0x40000001), (CpuidEntry{0x40000001, 0, 0, 0x5, 0xF0, 0, 0}));
  EXPECT_EQ(At(Table("amd-lwp-lite", RichHost(), 0), 0x40000001).ebx, 0u);
  size_t hypervisor_leaves = 0;
  for (const CpuidEntry& e : t) hypervisor_leaves += e.function >> 28 == 0x4;
  EXPECT_EQ(hypervisor_leaves, 2u);
}

TEST(CpuidTable, OverridesApplyLastUnfilteredAndCreateLeaves) {
  Result<CpuProfile> r = parse_profile(
      ProfileWith({
          "  \"features\": [\"fpu\", \"lm\"],",
          "  \"lwp\": {\"interrupt\": true, \"events\": [\"IRE\"], \"max_events\": 1},",
          "  \"cpuid_overrides\": [",
          "    {\"leaf\": \"0x8000001C\", \"register\": \"edx\", \"clear\": \"0x2\"},",
          "    {\"leaf\": \"0x12345\", \"register\": \"eax\", \"set\": 1},",
          "    {\"leaf\": 1, \"register\": \"ecx\", \"set\": \"0x00200000\"},",
          "    {\"leaf\": \"0x40000000\", \"register\": \"edx\", \"set\": \"0x1\"}",
          "  ],",
      }),
      "t.json");
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto t = build_guest_cpuid(PoorHost(), *r, 0);
  // The LWP leaf says EDX = Enabled|Interrupt|IRE = 0x7; the override removes Interrupt.
  EXPECT_EQ(At(t, 0x8000001C).edx, 0x5u);
  EXPECT_EQ(At(t, 0x12345), (CpuidEntry{0x12345, 0, 0, 1, 0, 0, 0}));
  EXPECT_EQ(At(t, 1).ecx, 0x00200000u) << "an override is the profile's word, not filtered";
  EXPECT_EQ(At(t, 0x40000000).edx, 0x1u);
  EXPECT_EQ(At(t, 0x80000000).eax, 0x8000001Cu) << "the default max reaches the LWP leaf";
}

TEST(CpuidTable, SortedAndUnique) {
  for (const char* name : kShipped) {
    const auto t = Table(name, RichHost());
    std::set<std::pair<uint32_t, uint32_t>> keys;
    for (size_t i = 0; i < t.size(); ++i) {
      EXPECT_TRUE(keys.insert({t[i].function, t[i].index}).second) << "duplicate entry";
      if (i > 0) {
        EXPECT_LE(t[i - 1].function, t[i].function);
      }
    }
  }
}

}  // namespace
}  // namespace vmm
