// The guest's own architectural PMU (CPUID 0xA, DESIGN §4.11, issue 23): the profile section,
// the leaf it gives, clamped to KVM's vPMU and dropped without one, and the migration checks that
// treat it like other CPUID features; and pmuvm's own model of it (§4.13, issue 41), whose leaf
// and PDCM bit are the profile's on any host. Expected words are written from the SDM's layout of
// leaf 0xA (vol. 3B, 20.2), not from the code.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "vmm/cpu/arch_pmu_config.h"
#include "vmm/cpu/cpu_profile.h"
#include "vmm/cpu/cpuid_table.h"
#include "vmm/cpu/describe_profile.h"
#include "vmm/cpu/migration_check.h"
#include "vmm/cpu/profile_baseline.h"
#include "vmm/cpu/profile_writer.h"

namespace vmm {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// An Intel profile with leaf 0xA in range; `pmu` is the architectural_pmu value (JSON).
std::string IntelProfile(const std::string& pmu, const std::string& name = "core") {
  return "{\n"
         "  \"name\": \"" +
         name +
         "\",\n"
         "  \"description\": \"test\",\n"
         "  \"vendor\": \"GenuineIntel\",\n"
         "  \"family\": \"0x6\",\n"
         "  \"model\": \"0x1A\",\n"
         "  \"max_basic_leaf\": \"0xB\",\n"
         "  \"architectural_pmu\": " +
         pmu +
         ",\n"
         "  \"cache\": {\"l1d\": {\"size_kib\": 32, \"ways\": 8, \"latency_cycles\": 4}, "
         "\"l2\": {\"size_kib\": 256, \"ways\": 8, \"latency_cycles\": 10}, "
         "\"dram_latency_cycles\": 200}\n"
         "}\n";
}

CpuProfile Parsed(const std::string& text) {
  Result<CpuProfile> r = parse_profile(text, "t.json");
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? *r : CpuProfile{};
}

std::string ErrorOf(const std::string& text) {
  Result<CpuProfile> r = parse_profile(text, "t.json");
  EXPECT_FALSE(r.ok());
  return r.error().message;
}

const char kV2[] = R"({"version": 2, "counters": 4, "counter_bits": 48, "fixed_counters": 3,
  "fixed_counter_bits": 48})";

// KVM's vPMU leaf 0xA on a host whose PMU has `counters` counters of 48 bits, version 4, 7
// events of which `unavailable` are not, 3 fixed counters of 48 bits.
CpuidEntry KvmLeafA(uint32_t counters, uint32_t unavailable = 0) {
  return {0xA,           0, 0, 4 | (counters << 8) | (48u << 16) | (7u << 24), unavailable, 0,
          3 | (48u << 5)};
}

TEST(ArchitecturalPmu, TheSectionParses) {
  const CpuProfile p = Parsed(IntelProfile(kV2));
  ASSERT_TRUE(p.architectural_pmu);
  EXPECT_EQ(*p.architectural_pmu, (ArchitecturalPmu{2, 4, 48, 3, 48}));
  EXPECT_FALSE(Parsed(IntelProfile("null")).architectural_pmu);
}

TEST(ArchitecturalPmu, WhatTheSectionCannotBe) {
  EXPECT_THAT(ErrorOf(IntelProfile(R"({"version": 1, "fixed_counters": 2})")),
              HasSubstr("version 1 has no fixed counters"));
  EXPECT_THAT(ErrorOf(IntelProfile(R"({"counters": 0})")), HasSubstr("architectural_pmu.counters"));
  EXPECT_THAT(ErrorOf(IntelProfile(R"({"vesion": 2})")), HasSubstr("vesion"));
  std::string amd = IntelProfile(kV2);
  amd.replace(amd.find("GenuineIntel"), 12, "AuthenticAMD");
  EXPECT_THAT(ErrorOf(amd), HasSubstr("vendor must be GenuineIntel"));
  std::string low = IntelProfile(kV2);
  low.replace(low.find("\"0xB\""), 5, "\"0x7\"");
  EXPECT_THAT(ErrorOf(low), HasSubstr("max_basic_leaf 0xa or more"));
}

// EAX = version 2 | 4 counters << 8 | 48 bits << 16 | 7 events << 24 = 0x07300402;
// EBX = 0 (all seven events available); EDX = 3 fixed | 48 bits << 5 = 0x603.
TEST(ArchitecturalPmu, LeafAIsTheProfilesWhereKvmOffersEnough) {
  const CpuProfile p = Parsed(IntelProfile(kV2));
  const std::vector<CpuidEntry> offered = {KvmLeafA(8)};
  const GuestCpuid g = filter_guest_cpuid(offered, p, 0);
  const CpuidEntry* a = find_cpuid_entry(g.entries, 0xA);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->eax, 0x07300402u);
  EXPECT_EQ(a->ebx, 0u);
  EXPECT_EQ(a->edx, 0x603u);
  EXPECT_TRUE(g.dropped.empty());
  EXPECT_EQ(describe_guest_pmu(g.entries),
            "architectural (CPUID 0xA) version 2, 4 counters of 48 bits, 3 fixed");
  EXPECT_EQ(*find_cpuid_entry(profile_cpuid(p, 0), 0xA), *a) << "unfiltered: the same";
}

TEST(ArchitecturalPmu, LeafAIsClampedToKvmsVpmu) {
  const CpuProfile p = Parsed(IntelProfile(kV2));
  const GuestCpuid g = filter_guest_cpuid(std::vector<CpuidEntry>{KvmLeafA(2, 0x4)}, p, 0);
  const CpuidEntry* a = find_cpuid_entry(g.entries, 0xA);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->eax, 0x07300202u) << "two counters";
  EXPECT_EQ(a->ebx, 0x4u) << "the event KVM lacks is unavailable";
  EXPECT_EQ(g.dropped, std::vector<std::string>{"architectural_pmu.counters 4 -> 2"});
}

TEST(ArchitecturalPmu, WithoutAVpmuTheGuestHasNoneAndTheDropSaysWhy) {
  const CpuProfile p = Parsed(IntelProfile(kV2));
  for (const std::vector<CpuidEntry>& host :
       {std::vector<CpuidEntry>{}, std::vector<CpuidEntry>{{0xA, 0, 0, 0, 0, 0, 0}}}) {
    const GuestCpuid g = filter_guest_cpuid(host, p, 0);
    const CpuidEntry* a = find_cpuid_entry(g.entries, 0xA);
    EXPECT_TRUE(a == nullptr || (a->eax == 0 && a->edx == 0));
    ASSERT_EQ(g.dropped.size(), 1u);
    EXPECT_THAT(g.dropped[0], HasSubstr("architectural_pmu (KVM offers no vPMU"));
    EXPECT_EQ(describe_guest_pmu(g.entries), std::nullopt);
  }
}

TEST(ArchitecturalPmu, AmdPerfCtrCoreIsAGuestPmuToo) {
  EXPECT_EQ(describe_guest_pmu(std::vector<CpuidEntry>{{0x80000001, 0, 0, 0, 0, 1u << 23, 0}}),
            "AMD PerfCtrCore (CPUID 0x80000001 ECX[23])");
  EXPECT_EQ(describe_guest_pmu(std::vector<CpuidEntry>{{0x80000001, 0, 0, 0, 0, 0, 0}}),
            std::nullopt);
}

// A restore or migration destination must present leaf 0xA as the guest saw it: counts and
// widths at least the guest's, no event the guest had lost.
TEST(ArchitecturalPmu, ADestinationWithLessIsRefusedFieldByField) {
  const std::vector<CpuidEntry> saw = {{0xA, 0, 0, 0x07300402, 0, 0, 0x603}};
  EXPECT_TRUE(cpuid_bits_missing(saw, saw).empty());
  EXPECT_TRUE(cpuid_bits_missing(saw, std::vector<CpuidEntry>{{0xA, 0, 0, 0x07300804, 0, 0, 0x603}})
                  .empty())
      << "more counters: it fits (3 < 8 though 0b011 & ~0b1000 is not 0)";
  EXPECT_EQ(
      cpuid_bits_missing(saw, std::vector<CpuidEntry>{{0xA, 0, 0, 0x07300202, 0x1, 0, 0x603}}),
      (std::vector<std::string>{"CPUID 0xa: architectural PMU counters 4, here 2",
                                "CPUID 0xa EBX: architectural events 1 (bit mask) not "
                                "available here"}));
  EXPECT_EQ(cpuid_bits_missing(saw, std::vector<CpuidEntry>{}).size(), 6u)
      << "none at all: version, counters, width, events, fixed counters and width";
}

TEST(ArchitecturalPmu, ProfilesCompareAndBaselineIt) {
  const CpuProfile big = Parsed(IntelProfile(kV2, "big"));
  const CpuProfile small = Parsed(IntelProfile(
      R"({"version": 2, "counters": 2, "counter_bits": 40, "fixed_counters": 3})", "small"));
  const CpuProfile none = Parsed(IntelProfile("null", "none"));
  EXPECT_TRUE(migration_refusals(small, big).empty());
  EXPECT_EQ(migration_refusals(big, small),
            (std::vector<std::string>{"architectural PMU counters 2 < 4",
                                      "architectural PMU counter_bits 40 < 48"}));
  EXPECT_EQ(migration_refusals(big, none),
            std::vector<std::string>{"architectural PMU (CPUID 0xA) missing"});
  const Result<CpuProfile> b = compute_baseline({big, small});
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b->architectural_pmu, (ArchitecturalPmu{2, 2, 40, 3, 48}));
  EXPECT_FALSE(compute_baseline({big, none})->architectural_pmu);
}

// The LWP capability that is not in CPUID (lwp.branch_prediction) compares and baselines too.
TEST(LwpBranchPrediction, WrittenComparedAndBaselined) {
  const std::string lwp = R"({"events": ["BRE"], "max_events": 1, "branch_prediction": false})";
  std::string text = IntelProfile("null", "quiet");
  text.insert(text.find("  \"architectural_pmu\""), "  \"lwp\": " + lwp + ",\n");
  const CpuProfile quiet = Parsed(text);
  ASSERT_FALSE(quiet.lwp.branch_prediction);
  EXPECT_FALSE(Parsed(to_profile_json(quiet)).lwp.branch_prediction);
  CpuProfile loud = quiet;
  loud.name = "loud";
  loud.lwp.branch_prediction = true;
  EXPECT_EQ(migration_refusals(quiet, loud),
            std::vector<std::string>{"LWP branch_prediction false != true"});
  EXPECT_EQ(migration_refusals(loud, quiet),
            std::vector<std::string>{"LWP branch_prediction true != false"});
  EXPECT_FALSE(compute_baseline({quiet, loud})->lwp.branch_prediction);
  EXPECT_TRUE(compute_baseline({loud, loud})->lwp.branch_prediction);
}

TEST(ArchitecturalPmu, WrittenAndDescribed) {
  const CpuProfile p = Parsed(IntelProfile(kV2));
  const CpuProfile again = Parsed(to_profile_json(p));
  EXPECT_EQ(again.architectural_pmu, p.architectural_pmu);
  EXPECT_THAT(
      describe_profile(p),
      HasSubstr("arch. PMU    CPUID 0xA version 2, counters 4, counter_bits 48, "
                "fixed_counters 3, fixed_counter_bits 48, modelled_by_pmuvm false, pebs false, "
                "lbr false "
                "(KVM's vPMU"));
}

// pmuvm's own model (DESIGN §4.13) ------------------------------------------------------------

const char kModelled[] = R"({"version": 4, "counters": 8, "counter_bits": 48, "fixed_counters": 3,
  "fixed_counter_bits": 48, "modelled_by_pmuvm": true})";

// IntelProfile with a features list.
std::string WithFeatures(std::string text, const std::string& features) {
  text.insert(text.find("  \"architectural_pmu\""), "  \"features\": " + features + ",\n");
  return text;
}

// Leaf 0xA and PDCM are the profile's whatever KVM offers: here nothing (a host without a PMU,
// KVM without PDCM). EAX = 4 | 8 << 8 | 48 << 16 | 7 << 24 = 0x07300804; EDX = 3 | 48 << 5.
TEST(ModelledArchitecturalPmu, LeafAAndPdcmAreTheProfilesOnAnyHost) {
  const CpuProfile p = Parsed(WithFeatures(IntelProfile(kModelled), R"(["pdcm", "sse3"])"));
  ASSERT_TRUE(p.architectural_pmu);
  EXPECT_TRUE(p.architectural_pmu->modelled_by_pmuvm);
  const GuestCpuid g = filter_guest_cpuid(std::vector<CpuidEntry>{}, p, 0);
  const CpuidEntry* a = find_cpuid_entry(g.entries, 0xA);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->eax, 0x07300804u);
  EXPECT_EQ(a->ebx, 0u);
  EXPECT_EQ(a->edx, 0x603u);
  const CpuidEntry* leaf1 = find_cpuid_entry(g.entries, 1);
  ASSERT_NE(leaf1, nullptr);
  EXPECT_EQ(leaf1->ecx & (1u << 15), 1u << 15) << "PDCM (CPUID 1 ECX[15]) kept";
  EXPECT_EQ(leaf1->ecx & 1u, 0u) << "sse3 is still filtered";
  EXPECT_EQ(g.dropped, std::vector<std::string>{"sse3"});
}

TEST(ModelledArchitecturalPmu, PdcmIsFilteredWhereKvmsVpmuGivesThePmu) {
  const CpuProfile p = Parsed(WithFeatures(IntelProfile(kV2), R"(["pdcm"])"));
  const GuestCpuid g = filter_guest_cpuid(std::vector<CpuidEntry>{KvmLeafA(8)}, p, 0);
  EXPECT_EQ(g.dropped, std::vector<std::string>{"pdcm"});
}

// The model's limits (pmu/arch_perfmon: versions 2-4, 8 + 3 counters of at most 48 bits), said
// at the key's section.
TEST(ModelledArchitecturalPmu, WhatTheModelCannotBe) {
  for (const char* pmu : {R"({"version": 5, "modelled_by_pmuvm": true})",
                          R"({"counters": 9, "modelled_by_pmuvm": true})",
                          R"({"counter_bits": 49, "modelled_by_pmuvm": true})",
                          R"({"fixed_counters": 4, "modelled_by_pmuvm": true})",
                          R"({"fixed_counter_bits": 64, "modelled_by_pmuvm": true})"}) {
    SCOPED_TRACE(pmu);
    EXPECT_THAT(ErrorOf(IntelProfile(pmu)), HasSubstr("pmuvm's architectural PMU model: "));
  }
  EXPECT_THAT(ErrorOf(IntelProfile(R"({"modelled_by_pmuvm": 1})")), HasSubstr("modelled_by_pmuvm"));
}

// The configuration each vCPU's model is built with: PERF_CAPABILITIES (and IA32_A_PMCx) with
// PDCM, the LLC events' last level the cache's L3 where there is one.
TEST(ModelledArchitecturalPmu, TheModelsConfiguration) {
  const CpuProfile p = Parsed(WithFeatures(IntelProfile(kModelled), R"(["pdcm"])"));
  const std::optional<pmu::arch_perfmon::Config> c = arch_pmu_config(p);
  ASSERT_TRUE(c);
  EXPECT_EQ(*c, (pmu::arch_perfmon::Config{4, 8, 48, 3, 48, true, false}));
  EXPECT_FALSE(arch_pmu_config(Parsed(IntelProfile(kModelled)))->full_width_writes);
  EXPECT_FALSE(arch_pmu_config(Parsed(IntelProfile(kV2)))) << "KVM's vPMU: no model";
  EXPECT_FALSE(arch_pmu_config(Parsed(IntelProfile("null"))));
}

TEST(ModelledArchitecturalPmu, WrittenDescribedAndComparedWithKvms) {
  const CpuProfile modelled = Parsed(IntelProfile(kModelled, "modelled"));
  EXPECT_EQ(Parsed(to_profile_json(modelled)).architectural_pmu, modelled.architectural_pmu);
  EXPECT_THAT(to_profile_json(modelled), HasSubstr("\"modelled_by_pmuvm\": true"));
  EXPECT_THAT(to_profile_json(Parsed(IntelProfile(kV2))), Not(HasSubstr("modelled_by_pmuvm")));
  EXPECT_THAT(describe_profile(modelled),
              HasSubstr("modelled_by_pmuvm true, pebs false, lbr false (pmuvm's model"));
  CpuProfile kvms = modelled;
  kvms.name = "kvms";
  kvms.architectural_pmu->modelled_by_pmuvm = false;
  EXPECT_EQ(migration_refusals(modelled, kvms),
            std::vector<std::string>{"architectural PMU modelled_by_pmuvm true != false"});
  EXPECT_FALSE(compute_baseline({modelled, kvms})->architectural_pmu->modelled_by_pmuvm);
  EXPECT_TRUE(compute_baseline({modelled, modelled})->architectural_pmu->modelled_by_pmuvm);
}

// PEBS (pmu/arch_perfmon/pebs.h): DS and DTES64 are the profile's like PDCM, and the profile
// must say what Linux reads to believe in it (MISC_ENABLE bit 12 clear) and in no BTS (bit 11).
std::string WithPebs(const std::string& features, const std::string& misc_enable,
                     const char* pmu = R"({"version": 4, "counters": 8, "modelled_by_pmuvm": true,
  "pebs": true})") {
  std::string text = WithFeatures(IntelProfile(pmu), features);
  if (!misc_enable.empty())
    text.insert(text.find("  \"architectural_pmu\""), "  \"misc_enable\": " + misc_enable + ",\n");
  return text;
}

TEST(ModelledArchitecturalPmu, PebsKeepsDsAndDtes64OnAnyHost) {
  const CpuProfile p = Parsed(WithPebs(R"(["ds", "dtes64", "pdcm"])", R"("0x880")"));
  ASSERT_TRUE(p.architectural_pmu);
  EXPECT_TRUE(p.architectural_pmu->pebs);
  EXPECT_TRUE(arch_pmu_config(p)->pebs);
  const GuestCpuid g = filter_guest_cpuid(std::vector<CpuidEntry>{}, p, 0);
  const CpuidEntry* leaf1 = find_cpuid_entry(g.entries, 1);
  ASSERT_NE(leaf1, nullptr);
  EXPECT_EQ(leaf1->edx & (1u << 21), 1u << 21) << "DS (CPUID 1 EDX[21])";
  EXPECT_EQ(leaf1->ecx & (1u << 2), 1u << 2) << "DTES64 (CPUID 1 ECX[2])";
  EXPECT_TRUE(g.dropped.empty());
  // Without the model's PEBS, DS is KVM's to offer (here: not).
  const CpuProfile no_pebs = Parsed(
      WithPebs(R"(["ds", "pdcm"])", R"("0x1880")", R"({"version": 4, "modelled_by_pmuvm": true})"));
  EXPECT_EQ(filter_guest_cpuid(std::vector<CpuidEntry>{}, no_pebs, 0).dropped,
            std::vector<std::string>{"ds"});
}

TEST(ModelledArchitecturalPmu, WhatPebsNeeds) {
  EXPECT_THAT(ErrorOf(WithPebs(R"(["ds", "dtes64", "pdcm"])", R"("0x880")",
                               R"({"version": 4, "pebs": true})")),
              HasSubstr("architectural_pmu.pebs needs modelled_by_pmuvm"));
  for (const char* missing : {"ds", "dtes64", "pdcm"}) {
    std::string features = "[";
    for (const char* f : {"ds", "dtes64", "pdcm"})
      if (std::string(f) != missing)
        features += std::string(features.size() > 1 ? ", " : "") + "\"" + f + "\"";
    EXPECT_THAT(ErrorOf(WithPebs(features + "]", R"("0x880")")),
                HasSubstr(std::string("needs feature \"") + missing + "\""));
  }
  EXPECT_THAT(ErrorOf(WithPebs(R"(["ds", "dtes64", "pdcm"])", R"("0x1880")")),
              HasSubstr("bit 12 (PEBS unavailable) clear"));
  EXPECT_THAT(ErrorOf(WithPebs(R"(["ds", "dtes64", "pdcm"])", "")),
              HasSubstr("bit 12 (PEBS unavailable) clear"));
  EXPECT_THAT(ErrorOf(WithPebs(R"(["pdcm"])", R"("0x880")",
                               R"({"version": 4, "modelled_by_pmuvm": true})")),
              HasSubstr("architectural_pmu.pebs is not set"));
  EXPECT_THAT(ErrorOf(WithPebs(R"(["ds", "dtes64", "pdcm"])", R"("0x80")")),
              HasSubstr("bit 11 (BTS unavailable) must be set"));
}

TEST(ModelledArchitecturalPmu, PebsIsWrittenDescribedAndMustMigrateAlike) {
  const CpuProfile pebs = Parsed(WithPebs(R"(["ds", "dtes64", "pdcm"])", R"("0x880")"));
  EXPECT_EQ(Parsed(to_profile_json(pebs)).architectural_pmu, pebs.architectural_pmu);
  EXPECT_THAT(to_profile_json(pebs), HasSubstr("\"pebs\": true"));
  EXPECT_THAT(to_profile_json(Parsed(IntelProfile(kModelled))), Not(HasSubstr("pebs")));
  EXPECT_THAT(describe_profile(pebs), HasSubstr("pebs true"));
  CpuProfile without = pebs;
  without.architectural_pmu->pebs = false;
  EXPECT_EQ(migration_refusals(pebs, without),
            std::vector<std::string>{"architectural PMU pebs true != false"});
}

// LBR (pmu/arch_perfmon/lbr.h): pmuvm's model only, its format in PERF_CAPABILITIES (PDCM).
TEST(ModelledArchitecturalPmu, LbrIsTheModelsAndNeedsPdcm) {
  const CpuProfile p = Parsed(WithFeatures(
      IntelProfile(R"({"version": 4, "modelled_by_pmuvm": true, "lbr": true})"), R"(["pdcm"])"));
  EXPECT_TRUE(p.architectural_pmu->lbr);
  EXPECT_TRUE(arch_pmu_config(p)->lbr);
  EXPECT_THAT(to_profile_json(p), HasSubstr("\"lbr\": true"));
  EXPECT_THAT(ErrorOf(WithFeatures(IntelProfile(R"({"version": 4, "lbr": true})"), R"(["pdcm"])")),
              HasSubstr("architectural_pmu.lbr needs modelled_by_pmuvm"));
  EXPECT_THAT(ErrorOf(IntelProfile(R"({"version": 4, "modelled_by_pmuvm": true, "lbr": true})")),
              HasSubstr("architectural_pmu.lbr needs feature \"pdcm\""));
  CpuProfile without = p;
  without.architectural_pmu->lbr = false;
  EXPECT_EQ(migration_refusals(p, without),
            std::vector<std::string>{"architectural PMU lbr true != false"});
}

}  // namespace
}  // namespace vmm
