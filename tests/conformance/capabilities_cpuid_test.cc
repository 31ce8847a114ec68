// Conformance: CPUID 0x8000001C (proposal §5.1, Table 2) and the migration baseline (§5.1 SVM
// note), as pmu/lwp/capabilities.h promises them.
#include <gtest/gtest.h>

#include <vector>

#include "pmu/lwp/architecture.h"
#include "pmu/lwp/capabilities.h"
#include "tests/conformance/lwp_fixture.h"

namespace pmu::lwp::conformance {
namespace {

// Table 2 EBX 7:0: LWPCBSize = 40 + 8 * LWPMaxEvents.
TEST(CapabilitiesCpuid, LwpcbSizeIs40Plus8PerEvent) {
  Capabilities c = FullCaps();
  for (uint8_t n : {1, 3, 7, 26}) {
    c.max_events = n;
    EXPECT_EQ(c.lwpcb_size(), 40u + 8u * n);
    EXPECT_EQ(cpuid_leaf(c, 0).ebx & 0xFF, 40u + 8u * n);
  }
  EXPECT_EQ(lwpcb_size(26), 248u);
  EXPECT_EQ(kMaxEventSlots, 26u);
}

// Table 2 EBX: LWPCBSize 7:0, LWPEventSize 15:8 = 32, LWPMaxEvents 23:16, LWPVersion 31:24 = 1.
TEST(CapabilitiesCpuid, EbxFieldsExact) {
  Capabilities c = FullCaps();
  c.max_events = 3;
  EXPECT_EQ(cpuid_leaf(c, kMsr0AllFeatures).ebx, 0x01032040u);  // 64 | 32<<8 | 3<<16 | 1<<24
  c.max_events = 1;
  EXPECT_EQ(cpuid_leaf(c, 0).ebx, 0x01012030u);  // 48 | 32<<8 | 1<<16 | 1<<24
}

// Table 2 ECX: CacheMax 4:0, DataAddress 5, CacheLevels 30, CacheLatency 31, rest reserved.
TEST(CapabilitiesCpuid, EcxFieldsExact) {
  Capabilities c = FullCaps();
  c.cache_max_bits = 10;
  EXPECT_EQ(cpuid_leaf(c, 0).ecx, 10u | (1u << 5) | (1u << 30) | (1u << 31));
  c.cache_max_bits = 31;
  c.data_address = false;
  c.cache_level_filter = false;
  EXPECT_EQ(cpuid_leaf(c, 0).ecx, 31u | (1u << 31));
  c.cache_max_bits = 12;
  c.cache_level_filter = true;
  c.cache_latency_filter = false;
  EXPECT_EQ(cpuid_leaf(c, 0).ecx, 12u | (1u << 30));
}

// Table 2 EDX: 0 Enabled(available), 1 Interrupt, 2 IRE, 3 BRE, 4 DME (numbered unlike EAX).
TEST(CapabilitiesCpuid, EdxNumbering) {
  Capabilities c;
  c.available = true;
  EXPECT_EQ(c.edx(), 0x1u);
  c.interrupt = true;
  EXPECT_EQ(c.edx(), 0x3u);
  c.interrupt = false;
  c.instructions_retired = true;
  EXPECT_EQ(c.edx(), 0x5u);
  c.instructions_retired = false;
  c.branches_retired = true;
  EXPECT_EQ(c.edx(), 0x9u);
  c.branches_retired = false;
  c.dcache_misses = true;
  c.cache_latency_filter = true;
  EXPECT_EQ(c.edx(), 0x11u);
  EXPECT_EQ(FullCaps().edx(), 0x1Fu);
  EXPECT_EQ(cpuid_leaf(FullCaps(), 0).edx, 0x1Fu);
  EXPECT_EQ(edx::kAvailable | edx::kInterrupt | edx::kIre | edx::kBre | edx::kDme, 0x1Fu);
}

// Table 2 EAX: bits taken from LWPMSR0 (0 EN, 1 IRE, 2 BRE, 3 DME, 31 INT); 30 Extension never.
TEST(CapabilitiesCpuid, EaxIsLwpmsr0FeatureBits) {
  Capabilities c = FullCaps();
  EXPECT_EQ(cpuid_leaf(c, 0).eax, 0u);
  EXPECT_EQ(cpuid_leaf(c, msr0::kEnabled | msr0::kIre).eax, 0x3u);
  EXPECT_EQ(cpuid_leaf(c, msr0::kEnabled | msr0::kDme | msr0::kInterrupt).eax, 0x80000009u);
  // The vector (47:40) is not a feature bit and does not reach EAX.
  EXPECT_EQ(cpuid_leaf(c, kMsr0AllFeatures | msr0_vector(0xFF)).eax, 0x8000000Fu);
  EXPECT_EQ(cpuid_leaf(c, kMsr0AllFeatures).eax & eax::kExtension, 0u);
}

// Table 2: EDX bit 0 = 0 means "ignore the rest"; header: the leaf is all zero when unavailable.
TEST(CapabilitiesCpuid, LeafAllZeroWhenUnavailable) {
  Capabilities c = FullCaps();
  c.available = false;
  EXPECT_EQ(cpuid_leaf(c, 0), CpuidLeaf{});
  EXPECT_EQ(cpuid_leaf(Capabilities{}, 0), CpuidLeaf{});
}

// Table 2: capabilities_from_cpuid inverts EBX/ECX/EDX.
TEST(CapabilitiesCpuid, FromCpuidRoundTrip) {
  Capabilities c = FullCaps();
  EXPECT_EQ(capabilities_from_cpuid(cpuid_leaf(c, kMsr0AllFeatures)), c);
  Capabilities lite;
  lite.available = true;
  lite.instructions_retired = true;
  lite.max_events = 1;
  lite.cache_max_bits = 17;
  lite.version = 1;
  EXPECT_EQ(capabilities_from_cpuid(cpuid_leaf(lite, 0)), lite);
  // Decoding a hand-made leaf.
  CpuidLeaf leaf{0, 0x01022038u, 0x8000000Bu, 0x15u};
  Capabilities d = capabilities_from_cpuid(leaf);
  EXPECT_TRUE(d.available);
  EXPECT_FALSE(d.interrupt);
  EXPECT_TRUE(d.instructions_retired);
  EXPECT_FALSE(d.branches_retired);
  EXPECT_TRUE(d.dcache_misses);
  EXPECT_EQ(d.max_events, 2);
  EXPECT_EQ(d.cache_max_bits, 11);
  EXPECT_FALSE(d.data_address);
  EXPECT_FALSE(d.cache_level_filter);
  EXPECT_TRUE(d.cache_latency_filter);
  EXPECT_EQ(d.version, 1);
}

// §4.3.1: latency caps at 2^n - 16.
TEST(CapabilitiesCpuid, MaxLatencyIs2PowNMinus16) {
  Capabilities c = FullCaps();
  c.cache_max_bits = 10;
  EXPECT_EQ(c.max_latency(), 1008u);
  c.cache_max_bits = 16;
  EXPECT_EQ(c.max_latency(), 65520u);
  c.cache_max_bits = 31;
  EXPECT_EQ(c.max_latency(), 0x7FFFFFF0u);
}

// DESIGN §4.1: EDX translated per feature into LWPMSR0 numbering (EN, IRE, BRE, DME, INT).
TEST(CapabilitiesCpuid, Msr0AllowedTranslatesEdxPerFeature) {
  EXPECT_EQ(FullCaps().msr0_allowed(), kMsr0AllFeatures);
  Capabilities c;
  c.available = true;
  EXPECT_EQ(c.msr0_allowed(), msr0::kEnabled);
  c.interrupt = true;
  EXPECT_EQ(c.msr0_allowed(), msr0::kEnabled | msr0::kInterrupt);
  c.interrupt = false;
  c.branches_retired = true;
  EXPECT_EQ(c.msr0_allowed(), msr0::kEnabled | msr0::kBre);
  c.branches_retired = false;
  c.dcache_misses = true;
  EXPECT_EQ(c.msr0_allowed(), msr0::kEnabled | msr0::kDme);
  c.dcache_misses = false;
  c.instructions_retired = true;
  EXPECT_EQ(c.msr0_allowed(), msr0::kEnabled | msr0::kIre);
}

// Table 1/2: EventIds 1..3 available per EDX; 0 and unknown ids never.
TEST(CapabilitiesCpuid, EventAvailable) {
  Capabilities c = FullCaps();
  c.branches_retired = false;
  EXPECT_FALSE(c.event_available(0));
  EXPECT_TRUE(c.event_available(1));
  EXPECT_FALSE(c.event_available(2));
  EXPECT_TRUE(c.event_available(3));
  EXPECT_FALSE(c.event_available(4));
  EXPECT_FALSE(c.event_available(63));
  EXPECT_FALSE(c.event_available(255));
}

// capabilities.h validate(): the full proposal profile and a 1-event lite profile are valid.
TEST(CapabilitiesValidate, AcceptsProposalProfiles) {
  EXPECT_TRUE(validate(FullCaps()).ok());
  Capabilities lite;
  lite.available = true;
  lite.instructions_retired = true;
  lite.max_events = 1;
  EXPECT_TRUE(validate(lite).ok());
  Capabilities c = FullCaps();
  c.max_events = 26;
  c.cache_max_bits = 31;
  EXPECT_TRUE(validate(c).ok());
}

// Table 2: LWPVersion 1.
TEST(CapabilitiesValidate, RejectsVersionOtherThan1) {
  Capabilities c = FullCaps();
  for (uint8_t v : {0, 2, 255}) {
    c.version = v;
    auto err = validate(c);
    ASSERT_FALSE(err.ok()) << int(v);
    EXPECT_FALSE(err.reason().empty());
  }
}

// Table 2 + EBX 7:0 being 8 bits: 1 <= MaxEvents <= 26.
TEST(CapabilitiesValidate, RejectsMaxEventsOutOfRange) {
  Capabilities c = FullCaps();
  c.max_events = 0;
  EXPECT_FALSE(validate(c).ok());
  c.max_events = 27;
  EXPECT_FALSE(validate(c).ok());
  c.max_events = 255;
  EXPECT_FALSE(validate(c).ok());
}

// Table 2 ECX 4:0: LWPCacheMax 10 to 31.
TEST(CapabilitiesValidate, RejectsCacheMaxOutOfRange) {
  Capabilities c = FullCaps();
  c.cache_max_bits = 9;
  EXPECT_FALSE(validate(c).ok());
  c.cache_max_bits = 32;
  EXPECT_FALSE(validate(c).ok());
  c.cache_max_bits = 0;
  EXPECT_FALSE(validate(c).ok());
  c.cache_max_bits = 10;
  EXPECT_TRUE(validate(c).ok());
}

// Table 2 ECX 30/31: "must support filtering by either latency or cache level".
TEST(CapabilitiesValidate, DcacheNeedsLatencyOrLevelFilter) {
  Capabilities c = FullCaps();
  c.cache_level_filter = false;
  c.cache_latency_filter = false;
  EXPECT_FALSE(validate(c).ok());
  c.cache_level_filter = true;
  EXPECT_TRUE(validate(c).ok());
  c.cache_level_filter = false;
  c.cache_latency_filter = true;
  EXPECT_TRUE(validate(c).ok());
  // Without DCache events no filter is needed.
  c.dcache_misses = false;
  c.cache_latency_filter = false;
  EXPECT_TRUE(validate(c).ok());
}

// §5.1 SVM note: AND of every feature bit over the migration set.
TEST(CapabilitiesBaseline, AndOfFeatureBits) {
  Capabilities a = FullCaps();
  Capabilities b = FullCaps();
  b.interrupt = false;
  b.branches_retired = false;
  b.data_address = false;
  b.cache_level_filter = false;
  Capabilities c = FullCaps();
  c.instructions_retired = false;
  std::vector<Capabilities> set{a, b, c};
  Capabilities r = baseline(set);
  EXPECT_TRUE(r.available);
  EXPECT_FALSE(r.interrupt);
  EXPECT_FALSE(r.instructions_retired);
  EXPECT_FALSE(r.branches_retired);
  EXPECT_TRUE(r.dcache_misses);
  EXPECT_FALSE(r.data_address);
  EXPECT_FALSE(r.cache_level_filter);
  EXPECT_TRUE(r.cache_latency_filter);
  EXPECT_EQ(r.version, 1);
  EXPECT_TRUE(validate(r).ok());

  // A member without LWP makes the set "not available".
  Capabilities none;
  std::vector<Capabilities> with_none{a, none};
  EXPECT_FALSE(baseline(with_none).available);
}

// §5.1 SVM note: minimum of the number of events (and of CacheMax, capabilities.h).
TEST(CapabilitiesBaseline, MinOfMaxEventsAndCacheMax) {
  Capabilities a = FullCaps();
  a.max_events = 3;
  a.cache_max_bits = 12;
  Capabilities b = FullCaps();
  b.max_events = 1;
  b.cache_max_bits = 20;
  Capabilities c = FullCaps();
  c.max_events = 26;
  c.cache_max_bits = 10;
  std::vector<Capabilities> set{a, b, c};
  Capabilities r = baseline(set);
  EXPECT_EQ(r.max_events, 1);
  EXPECT_EQ(r.cache_max_bits, 10);
  EXPECT_EQ(r.lwpcb_size(), 48u);
  // Exact whole result for this set: everything else equal to FullCaps.
  Capabilities expect = FullCaps();
  expect.max_events = 1;
  expect.cache_max_bits = 10;
  EXPECT_EQ(r, expect);
}

// capabilities.h baseline(): DCache misses dropped when the AND leaves no filter.
TEST(CapabilitiesBaseline, DropsDcacheWhenNoFilterRemains) {
  Capabilities a = FullCaps();
  a.cache_level_filter = false;  // latency only
  Capabilities b = FullCaps();
  b.cache_latency_filter = false;  // level only
  std::vector<Capabilities> set{a, b};
  Capabilities r = baseline(set);
  EXPECT_FALSE(r.dcache_misses);
  EXPECT_FALSE(r.cache_level_filter);
  EXPECT_FALSE(r.cache_latency_filter);
  EXPECT_TRUE(r.instructions_retired);
  EXPECT_TRUE(r.branches_retired);
  EXPECT_TRUE(r.interrupt);
  EXPECT_TRUE(validate(r).ok());
  EXPECT_EQ(cpuid_leaf(r, 0).edx, 0xFu);
}

// capabilities.h baseline(): an empty set is "not available"; one member is itself.
TEST(CapabilitiesBaseline, EmptySetAndSingleMember) {
  EXPECT_FALSE(baseline(std::span<const Capabilities>{}).available);
  EXPECT_EQ(cpuid_leaf(baseline(std::span<const Capabilities>{}), 0), CpuidLeaf{});
  std::vector<Capabilities> one{FullCaps()};
  EXPECT_EQ(baseline(one), FullCaps());
}

}  // namespace
}  // namespace pmu::lwp::conformance
