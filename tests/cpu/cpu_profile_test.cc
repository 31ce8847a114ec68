// CPU profiles (vmm/cpu/cpu_profile.h, schema in vmm/profiles/README.md): the shipped profiles,
// the §5.1 migration baseline, defaults, --cpu resolution, and one test per error class with the
// exact FILE:LINE:COLUMN it must report. Positions are counted by hand in the texts below.
#include "vmm/cpu/cpu_profile.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "pmu/lwp/architecture.h"
#include "pmu/lwp/capabilities.h"
#include "tests/cpu/builtin_profile.h"
#include "tests/cpu/profile_text.h"
#include "vmm/cpu/describe_profile.h"
#include "vmm/profiles/builtin_profiles.h"

namespace vmm {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using vmm::testing::Builtin;
using vmm::testing::Lines;
using vmm::testing::ProfileWith;
namespace msr0 = pmu::lwp::msr0;

std::string ErrorOf(const std::string& text, std::string_view source = "t.json") {
  Result<CpuProfile> r = parse_profile(text, source);
  EXPECT_FALSE(r.ok()) << "parsed although an error was expected";
  return r.error().message;
}

std::string BuiltinText(std::string_view name) {
  for (const auto& p : profiles::builtin_profile_texts())
    if (p.name == name) return std::string(p.text);
  ADD_FAILURE() << "no embedded text for " << name;
  return {};
}

std::string TempDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// ---- the shipped profiles ------------------------------------------------------------------

// DESIGN §4.5's four and §4.13's intel-skylake.
TEST(ShippedProfiles, NamesAreThoseOfTheDesign) {
  EXPECT_EQ(builtin_profile_names(),
            (std::vector<std::string>{"amd-lwp", "amd-lwp-baseline", "amd-lwp-lite",
                                      "intel-netburst", "intel-skylake"}));
}

TEST(ShippedProfiles, EveryProfileParsesAndValidates) {
  for (const std::string& name : builtin_profile_names()) {
    SCOPED_TRACE(name);
    const CpuProfile p = Builtin(name);
    EXPECT_EQ(p.name, name);
    EXPECT_EQ(p.source, name + ".json");
    EXPECT_FALSE(p.description.empty());
    EXPECT_TRUE(pmu::lwp::validate(p.lwp).ok());
    // The policy never asks for more than the profile offers (else LWPMSR0 would #GP).
    EXPECT_EQ(p.lwp_enable_policy & ~msr0::kVectorMask & ~p.lwp.msr0_allowed(), 0u);
    EXPECT_GT(p.cache.dram_latency_cycles, p.cache.l2.latency_cycles);
  }
}

// The embedded text is the file, and both load to the same profile.
TEST(ShippedProfiles, EmbeddedTextIsTheFileAndLoadsIdentically) {
  for (const std::string& name : builtin_profile_names()) {
    SCOPED_TRACE(name);
    const std::string path = "vmm/profiles/" + name + ".json";  // runfiles (data dependency)
    std::ifstream in(path);
    ASSERT_TRUE(in) << path;
    std::stringstream file;
    file << in.rdbuf();
    EXPECT_EQ(file.str(), BuiltinText(name));
    Result<CpuProfile> loaded = load_profile_file(path);
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    CpuProfile builtin = Builtin(name);
    loaded->source = builtin.source;
    EXPECT_EQ(describe_profile(*loaded), describe_profile(builtin));
  }
}

TEST(ShippedProfiles, AmdLwpIsTheFullProposal) {
  const CpuProfile p = Builtin("amd-lwp");
  EXPECT_EQ(p.vendor, "AuthenticAMD");
  EXPECT_EQ(p.family, 0x15u);
  EXPECT_EQ(p.model, 0x01u);
  pmu::lwp::Capabilities want;
  want.available = true;
  want.interrupt = true;
  want.instructions_retired = want.branches_retired = want.dcache_misses = true;
  want.max_events = 3;
  want.cache_max_bits = 10;
  want.data_address = want.cache_level_filter = want.cache_latency_filter = true;
  want.version = 1;
  EXPECT_EQ(p.lwp, want);
  EXPECT_EQ(p.lwp_interrupt_vector, 0xF0);
  EXPECT_EQ(p.lwp_enable_policy, msr0::kEnabled | msr0::kIre | msr0::kBre | msr0::kDme |
                                     msr0::kInterrupt | (uint64_t{0xF0} << 40));
  EXPECT_FALSE(p.netburst.has_value());
  EXPECT_FALSE(p.misc_enable.has_value());
  ASSERT_TRUE(p.cache.l3.has_value());
  EXPECT_EQ(p.cache.line_size, 64u);
}

// DESIGN §4.13: a Skylake Linux and rr recognise by its signature, with pmuvm's version-4 PMU
// (PERF_CAPABILITIES through PDCM) and PEBS (DS, DTES64, MISC_ENABLE bit 12 clear), TSX hidden,
// no BTS (MISC_ENABLE bit 11 set).
TEST(ShippedProfiles, IntelSkylakeHasPmuvmsArchitecturalPmu) {
  const CpuProfile p = Builtin("intel-skylake");
  EXPECT_EQ(p.vendor, "GenuineIntel");
  EXPECT_EQ(p.family, 0x6u);
  EXPECT_EQ(p.model, 0x5Eu);
  ASSERT_TRUE(p.architectural_pmu.has_value());
  EXPECT_EQ(*p.architectural_pmu, (ArchitecturalPmu{4, 8, 48, 3, 48, true, true, true}));
  EXPECT_FALSE(p.netburst.has_value());
  EXPECT_FALSE(p.lwp.available);
  auto has = [&p](const char* f) { return p.has_feature(f); };
  for (const char* f : {"pdcm", "ds", "dtes64"}) EXPECT_TRUE(has(f)) << f;
  EXPECT_TRUE(has("hypervisor")) << "Linux's Intel driver reads counters with RDMSR then (0008)";
  for (const char* hidden : {"rtm", "hle", "htt", "xsave", "avx"})
    EXPECT_FALSE(has(hidden)) << hidden;
  ASSERT_TRUE(p.misc_enable.has_value());
  EXPECT_EQ(*p.misc_enable & 0x1880, 0x0880u) << "perfmon and PEBS available, BTS unavailable";
}

TEST(ShippedProfiles, AmdLwpLiteHasOneEventNoInterruptNoDcache) {
  const CpuProfile p = Builtin("amd-lwp-lite");
  EXPECT_TRUE(p.lwp.available);
  EXPECT_TRUE(p.lwp.instructions_retired);
  EXPECT_FALSE(p.lwp.branches_retired);
  EXPECT_FALSE(p.lwp.dcache_misses);
  EXPECT_FALSE(p.lwp.interrupt);
  EXPECT_EQ(p.lwp.max_events, 1);
  EXPECT_EQ(p.lwp_enable_policy, msr0::kEnabled | msr0::kIre);
  EXPECT_EQ(p.lwp_interrupt_vector, 0);
  EXPECT_FALSE(p.cache.l3.has_value());
}

TEST(ShippedProfiles, IntelNetburst) {
  const CpuProfile p = Builtin("intel-netburst");
  EXPECT_EQ(p.vendor, "GenuineIntel");
  EXPECT_EQ(p.family, 0xFu);
  EXPECT_EQ(p.model, 4u);  // Prescott 2M: EM64T, and no IQ_ESCRs (models 1-2 only)
  EXPECT_FALSE(p.lwp.available);
  EXPECT_EQ(p.lwp_enable_policy, 0u);
  ASSERT_TRUE(p.misc_enable.has_value());
  EXPECT_EQ(*p.misc_enable, 0x1880u);
  EXPECT_TRUE(*p.misc_enable & (1u << 7)) << "performance monitoring available";
  EXPECT_TRUE(*p.misc_enable & (1u << 12)) << "PEBS unavailable";
  ASSERT_TRUE(p.netburst.has_value());
  EXPECT_EQ(*p.netburst, (NetburstParams{18, 40, 1}));
  EXPECT_LT(p.max_basic_leaf, 0xAu) << "no architectural perfmon leaf: Linux picks the P4 driver";
  auto has = [&p](const char* f) { return p.has_feature(f); };
  for (const char* f : {"lm", "nx", "syscall", "sse2", "sse3", "apic", "clfsh"})
    EXPECT_TRUE(has(f)) << f;
  for (const char* f : {"ds", "htt", "pdcm", "dtes64", "x2apic", "avx", "xsave", "monitor"})
    EXPECT_FALSE(has(f)) << f;
}

// Proposal §5.1: "the logical AND of the available feature bits and the minimum of the number of
// events over all processors in the migration set".
TEST(Baseline, AmdLwpAndLiteIsTheAndOfBitsAndMinOfCounts) {
  const CpuProfile b = Builtin("amd-lwp-baseline");
  pmu::lwp::Capabilities want;        // amd-lwp AND amd-lwp-lite, written out field by field
  want.available = true;              // both
  want.interrupt = false;             // lite has none
  want.instructions_retired = true;   // both
  want.branches_retired = false;      // lite lacks BRE
  want.dcache_misses = false;         // lite lacks DME
  want.max_events = 1;                // min(3, 1)
  want.cache_max_bits = 10;           // min(10, 10)
  want.data_address = false;          // lite: false
  want.cache_level_filter = false;    // lite: false
  want.cache_latency_filter = false;  // lite: false
  want.version = 1;
  EXPECT_EQ(b.lwp, want);
  EXPECT_EQ(b.lwp_enable_policy, msr0::kEnabled | msr0::kIre);  // (EN|IRE|BRE|DME|INT) & (EN|IRE)
  EXPECT_EQ(b.lwp_interrupt_vector, 0);
  EXPECT_EQ(b.baseline_of, (std::vector<std::string>{"amd-lwp", "amd-lwp-lite"}));
  // Identity and cache come from the first member.
  const CpuProfile first = Builtin("amd-lwp");
  EXPECT_EQ(b.vendor, first.vendor);
  EXPECT_EQ(b.family, first.family);
  EXPECT_EQ(b.model, first.model);
  EXPECT_EQ(b.cache, first.cache);
}

TEST(Baseline, MemberOrderChangesIdentityNotCapabilities) {
  Result<CpuProfile> r =
      parse_profile(Lines({"{", "  \"name\": \"rev\",", "  \"description\": \"d\",",
                           "  \"baseline_of\": [\"amd-lwp-lite\", \"amd-lwp\"]", "}"}),
                    "rev.json");
  ASSERT_TRUE(r.ok()) << r.error().message;
  const CpuProfile forward = Builtin("amd-lwp-baseline");
  EXPECT_EQ(r->lwp, forward.lwp);
  EXPECT_EQ(r->lwp_enable_policy, forward.lwp_enable_policy);
  EXPECT_EQ(r->model, 0x10u);  // amd-lwp-lite's
}

TEST(Baseline, WithANonLwpMemberHasNoLwpAndNoNetburst) {
  Result<CpuProfile> r =
      parse_profile(Lines({"{", "  \"name\": \"mix\",", "  \"description\": \"d\",",
                           "  \"baseline_of\": [\"amd-lwp\", \"intel-netburst\"]", "}"}),
                    "mix.json");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->lwp.available);
  EXPECT_EQ(r->lwp_enable_policy, 0u);
  EXPECT_FALSE(r->netburst.has_value());
}

TEST(Baseline, FileMembersAreRelativeToTheReferencingFile) {
  const std::string dir = TempDir() + "/baseline_files";
  std::filesystem::create_directories(dir);
  WriteFile(dir + "/two.json",
            ProfileWith({"  \"lwp\": {\"events\": [\"IRE\", \"BRE\"], \"max_events\": 2},"}));
  WriteFile(dir + "/set.json", Lines({"{", "  \"name\": \"set\",", "  \"description\": \"d\",",
                                      "  \"baseline_of\": [\"amd-lwp\", \"two.json\"]", "}"}));
  Result<CpuProfile> r = load_profile_file(dir + "/set.json");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->lwp.branches_retired);
  EXPECT_FALSE(r->lwp.dcache_misses);
  EXPECT_EQ(r->lwp.max_events, 2);
  EXPECT_EQ(r->lwp_enable_policy, msr0::kEnabled | msr0::kIre | msr0::kBre);
}

// ---- defaults, numbers, --cpu ----------------------------------------------------------------

TEST(Parse, DefaultsOfAMinimalProfile) {
  Result<CpuProfile> r = parse_profile(ProfileWith({}), "t.json");
  ASSERT_TRUE(r.ok()) << r.error().message;
  const CpuProfile& p = *r;
  EXPECT_EQ(p.stepping, 0u);
  EXPECT_EQ(p.brand, "pmuvm t");
  EXPECT_FALSE(p.lwp.available);
  EXPECT_FALSE(p.misc_enable.has_value());
  EXPECT_FALSE(p.netburst.has_value());
  EXPECT_TRUE(p.cpuid_overrides.empty());
  EXPECT_EQ(p.cache.line_size, 64u);
  EXPECT_FALSE(p.cache.l3.has_value());
}

TEST(Parse, EnablePolicyDefaultsToEverythingOffered) {
  Result<CpuProfile> r = parse_profile(
      ProfileWith({"  \"lwp\": {\"interrupt\": true, \"events\": [\"BRE\"], \"max_events\": 4},"}),
      "t.json");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->lwp_enable_policy,
            msr0::kEnabled | msr0::kBre | msr0::kInterrupt | (uint64_t{0xF0} << 40));
  EXPECT_EQ(r->lwp_interrupt_vector, 0xF0);
}

// lwp.branch_prediction (DESIGN §4.11): true unless a profile says its LWP captures none; it
// travels through the writer, shows in the description, must match on a migration destination
// and is ANDed by a baseline.
TEST(Parse, LwpBranchPredictionIsCapturedUnlessSaidOtherwise) {
  const char* without = "  \"lwp\": {\"events\": [\"BRE\"], \"max_events\": 1},";
  const char* with_false =
      "  \"lwp\": {\"events\": [\"BRE\"], \"max_events\": 1, \"branch_prediction\": false},";
  Result<CpuProfile> captured = parse_profile(ProfileWith({without}), "t.json");
  Result<CpuProfile> not_captured = parse_profile(ProfileWith({with_false}), "t.json");
  ASSERT_TRUE(captured.ok() && not_captured.ok())
      << captured.error().message << not_captured.error().message;
  EXPECT_TRUE(captured->lwp.branch_prediction);
  EXPECT_FALSE(not_captured->lwp.branch_prediction);
  EXPECT_EQ(captured->lwp.edx(), not_captured->lwp.edx()) << "not in CPUID";
  EXPECT_THAT(describe_profile(*not_captured), HasSubstr("branch_prediction false"));
  EXPECT_THAT(describe_profile(*captured), HasSubstr("branch_prediction true"));
  Result<CpuProfile> wrong =
      parse_profile(ProfileWith({"  \"lwp\": {\"events\": [\"BRE\"], \"max_events\": 1, "
                                 "\"branch_prediction\": 0},"}),
                    "t.json");
  EXPECT_THAT(wrong.error().message, HasSubstr("lwp.branch_prediction"));
}

TEST(Parse, HexStringsAndNumbersAreTheSame) {
  Result<CpuProfile> a = parse_profile(
      ProfileWith({"  \"stepping\": \"0xA\",", "  \"misc_enable\": \"0x1880\","}), "t.json");
  Result<CpuProfile> b =
      parse_profile(ProfileWith({"  \"stepping\": 10,", "  \"misc_enable\": 6272,"}), "t.json");
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(a->stepping, 10u);
  EXPECT_EQ(a->misc_enable, b->misc_enable);
  EXPECT_EQ(a->family, 0x15u);
}

TEST(CpuOption, NameThenPathThenError) {
  Result<CpuProfile> by_name = resolve_cpu_option("amd-lwp-lite");
  ASSERT_TRUE(by_name.ok()) << by_name.error().message;
  EXPECT_EQ(by_name->source, "amd-lwp-lite.json");

  const std::string path = TempDir() + "/mine.json";
  WriteFile(path, ProfileWith({}));
  Result<CpuProfile> by_path = resolve_cpu_option(path);
  ASSERT_TRUE(by_path.ok()) << by_path.error().message;
  EXPECT_EQ(by_path->source, path);

  Result<CpuProfile> unknown = resolve_cpu_option("amd-lwpp");
  EXPECT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().message,
            "unknown CPU profile 'amd-lwpp': not a shipped profile (amd-lwp, amd-lwp-baseline, "
            "amd-lwp-lite, intel-netburst, intel-skylake) and no such file");
}

TEST(Describe, SummarisesIdentityLwpAndCache) {
  const std::string s = describe_profile(Builtin("amd-lwp"));
  EXPECT_THAT(s, StartsWith("amd-lwp - "));
  EXPECT_THAT(s, HasSubstr("AuthenticAMD family 0x15 model 0x1 stepping 2"));
  EXPECT_THAT(s, HasSubstr("events IRE BRE DME, 3 slot(s) (LWPCB 64 bytes), threshold interrupt"));
  EXPECT_THAT(s, HasSubstr("enable policy EN|IRE|BRE|DME|INT, vector 0xf0"));
  EXPECT_THAT(s, HasSubstr("CPUID 0x8000001C eax=0x8000000f ebx=0x01032040 ecx=0xc000002a "
                           "edx=0x0000001f"));
  EXPECT_THAT(s, HasSubstr("L3 size_kib 8192, ways 64, latency_cycles 65"));
  EXPECT_THAT(s, HasSubstr("cache        line_size 64, dram_latency_cycles 250; L1D size_kib 16"));
  EXPECT_THAT(s, HasSubstr("version 1, interrupt true, max_events 3, cache_max_bits 10, "
                           "data_address true, cache_level_filter true, cache_latency_filter true, "
                           "branch_prediction true\n"));
  const std::string n = describe_profile(Builtin("intel-netburst"));
  EXPECT_THAT(
      n,
      HasSubstr("NetBurst     counters 18, counter_bits 40, threads_per_core 1 (T1 bits inert)\n"));
  EXPECT_THAT(n, HasSubstr("MISC_ENABLE  0x1880"));
  EXPECT_THAT(describe_profile(Builtin("amd-lwp-baseline")),
              HasSubstr("baseline of amd-lwp, amd-lwp-lite"));
}

// ---- errors: one test per class, exact FILE:LINE:COLUMN ----------------------------------------
// A syntax error points at the byte where nlohmann's parser noticed it (the last byte it read);
// the reason is nlohmann's. Errors found after parsing point at the key or element they name.

TEST(Errors, JsonSyntaxPointsWhereTheParserStopped) {
  // Line 7 lacks its comma; the parser trips over the key "cache" at line 8 (columns 3..9).
  EXPECT_EQ(ErrorOf(ProfileWith({"  \"stepping\": 2"})),
            "t.json:8:9: JSON syntax error while parsing object - unexpected string literal; "
            "expected '}'");
}

TEST(Errors, JsonSyntaxBadLiteralAndEndOfInput) {
  EXPECT_EQ(ErrorOf(ProfileWith({"  \"stepping\": two,"})),
            "t.json:7:16: JSON syntax error while parsing value - invalid literal; last read: "
            "'\"stepping\": tw'");
  EXPECT_EQ(ErrorOf(Lines({"{", "  \"name\": \"t\","})),
            "t.json:3:1: JSON syntax error while parsing object key - unexpected end of input; "
            "expected string literal");
}

TEST(Errors, UnknownTopLevelKey) {
  EXPECT_THAT(ErrorOf(ProfileWith({"  \"steping\": 2,"})),
              StartsWith("t.json:7:3: unknown key 'steping' in the profile (known keys: name, "
                         "description, vendor, family, model, stepping,"));
}

TEST(Errors, UnknownNestedKeyIsTheFirstInTheText) {
  //          1         2         3         4         5
  // 123456789012345678901234567890123456789012345678901234567
  //   "lwp": {"events": ["IRE"], "max_events": 1, "interupt": true, "aaa": 1},
  EXPECT_THAT(ErrorOf(ProfileWith({"  \"lwp\": {\"events\": [\"IRE\"], \"max_events\": 1, "
                                   "\"interupt\": true, \"aaa\": 1},"})),
              StartsWith("t.json:7:47: unknown key 'interupt' in lwp (known keys: available,"));
}

TEST(Errors, DuplicateKey) {
  EXPECT_EQ(ErrorOf(ProfileWith({"  \"stepping\": 1,", "  \"stepping\": 2,"})),
            "t.json:8:3: duplicate key stepping (JSON would silently keep only the last one)");
  // The same key spelt with a \u escape is still the same key.
  EXPECT_EQ(ErrorOf(ProfileWith({"  \"stepping\": 1,", "  \"\\u0073tepping\": 2,"})),
            "t.json:8:3: duplicate key stepping (JSON would silently keep only the last one)");
}

TEST(Errors, PositionsSurviveAByteOrderMark) {
  EXPECT_THAT(ErrorOf("\xEF\xBB\xBF" + ProfileWith({"  \"steping\": 2,"})),
              StartsWith("t.json:7:3: unknown key 'steping'"));
}

TEST(Errors, WrongTypes) {
  EXPECT_EQ(ErrorOf(ProfileWith({"  \"stepping\": \"two\","})),
            "t.json:7:3: stepping must be an integer or a \"0x\" hex string, got string \"two\"");
  //   "lwp": {"events": ["IRE"], "max_events": 1, "interrupt": "yes"},   -> col 47
  EXPECT_EQ(ErrorOf(ProfileWith({"  \"lwp\": {\"events\": [\"IRE\"], \"max_events\": 1, "
                                 "\"interrupt\": \"yes\"},"})),
            "t.json:7:47: lwp.interrupt must be true or false, got string \"yes\"");
  EXPECT_EQ(ErrorOf("[1, 2]\n"), "t.json:1:1: the profile must be an object, got an array");
}

TEST(Errors, OutOfRangeInTheShippedFileLayout) {
  std::string text = BuiltinText("amd-lwp");
  const std::string from = "\"max_events\": 3";
  ASSERT_NE(text.find(from), std::string::npos);
  text.replace(text.find(from), from.size(), "\"max_events\": 40");
  EXPECT_EQ(ErrorOf(text, "amd-lwp.json"),
            "amd-lwp.json:26:5: lwp.max_events must be 1..26, got 40");
}

TEST(Errors, OutOfRangeNegativeAndHexRanges) {
  EXPECT_EQ(ErrorOf(ProfileWith({"  \"stepping\": -1,"})),
            "t.json:7:3: stepping must be 0x0..0xf, got -1");
  //   "lwp": {"interrupt": true, "events": ["IRE"], "max_events": 1, "interrupt_vector": 8},
  //   1-2 spaces, "lwp" 3-7, {10, "interrupt" 11-21, true 24-27, "events" 30-37, [40..46],
  //   "max_events" 49-60, 1 63, "interrupt_vector" 66
  EXPECT_EQ(ErrorOf(ProfileWith({"  \"lwp\": {\"interrupt\": true, \"events\": [\"IRE\"], "
                                 "\"max_events\": 1, \"interrupt_vector\": 8},"})),
            "t.json:7:66: lwp.interrupt_vector must be 0x20..0xff, got 0x8");
}

TEST(Errors, ModelNeedingExtendedFieldOnAnOldFamily) {
  EXPECT_THAT(ErrorOf(Lines({"{", "  \"name\": \"t\",", "  \"description\": \"d\",",
                             "  \"vendor\": \"GenuineIntel\",", "  \"family\": 5,",
                             "  \"model\": \"0x1A\",", "  \"cache\": {}", "}"})),
              StartsWith("t.json:6:3: model 0x1a needs CPUID's extended model field"));
}

TEST(Errors, VendorMustBeTwelveCharacters) {
  EXPECT_THAT(ErrorOf(Lines({"{", "  \"name\": \"t\",", "  \"description\": \"d\",",
                             "  \"vendor\": \"AMD\",", "  \"family\": 5,", "  \"model\": 1,",
                             "  \"cache\": {}", "}"})),
              StartsWith("t.json:4:3: vendor must be exactly 12 printable ASCII characters"));
}

TEST(Errors, MissingRequiredKeys) {
  EXPECT_EQ(ErrorOf(Lines({"{", "  \"name\": \"t\",", "  \"description\": \"d\",",
                           "  \"family\": 5,", "  \"model\": 1,", "  \"cache\": {}", "}"})),
            "t.json:1:1: missing required key 'vendor' in the profile");
  EXPECT_EQ(ErrorOf(ProfileWith({"  \"lwp\": {\"events\": [\"IRE\"]},"})),
            "t.json:7:3: missing required key 'max_events' in lwp");
}

TEST(Errors, ProfileFailingLwpValidate) {
  // DCache-miss events without a latency or cache-level filter (pmu::lwp::validate, §5.4).
  EXPECT_EQ(ErrorOf(ProfileWith({"  \"lwp\": {", "    \"events\": [\"IRE\", \"DME\"],",
                                 "    \"max_events\": 2", "  },"})),
            "t.json:7:3: lwp: LWP DCache-miss events need a latency or a cache-level filter "
            "(proposal §5.4)");
}

TEST(Errors, EnablePolicyAskingForAMissingFeature) {
  // Line 10: `    "enable_policy": ["EN", "IRE", "INT"]`, "INT" at column 36.
  EXPECT_EQ(
      ErrorOf(ProfileWith({"  \"lwp\": {", "    \"events\": [\"IRE\"],", "    \"max_events\": 1,",
                           "    \"enable_policy\": [\"EN\", \"IRE\", \"INT\"]", "  },"})),
      "t.json:10:36: lwp.enable_policy[2]: the policy enables INT but the profile does not "
      "offer it (needs lwp.interrupt: true); LWPMSR0 would #GP");
  // Line 10: `    "enable_policy": ["EN", "BRE"]`, "BRE" at column 29.
  EXPECT_THAT(
      ErrorOf(ProfileWith({"  \"lwp\": {", "    \"events\": [\"IRE\"],", "    \"max_events\": 1,",
                           "    \"enable_policy\": [\"EN\", \"BRE\"]", "  },"})),
      StartsWith("t.json:10:29: lwp.enable_policy[1]: the policy enables BRE but the "
                 "profile does not offer it (needs \"BRE\" in lwp.events)"));
}

TEST(Errors, EnablePolicyWithoutEn) {
  EXPECT_THAT(
      ErrorOf(ProfileWith({"  \"lwp\": {", "    \"events\": [\"IRE\"],", "    \"max_events\": 1,",
                           "    \"enable_policy\": [\"IRE\"]", "  },"})),
      StartsWith("t.json:10:5: lwp.enable_policy enables features without EN"));
}

TEST(Errors, UnavailableLwpWithOtherFields) {
  //   "lwp": {"available": false, "events": ["IRE"]},   "events" at column 31
  EXPECT_EQ(ErrorOf(ProfileWith({"  \"lwp\": {\"available\": false, \"events\": [\"IRE\"]},"})),
            "t.json:7:31: lwp.events has no meaning when lwp.available is false");
}

TEST(Errors, UnknownOrRepeatedFeatureName) {
  //   "features": ["fpu", "avx3"],   element "avx3" at column 23
  EXPECT_EQ(ErrorOf(ProfileWith({"  \"features\": [\"fpu\", \"avx3\"],"})),
            "t.json:7:23: features[1]: unknown CPUID feature \"avx3\" (the names are listed in "
            "vmm/profiles/README.md)");
  EXPECT_EQ(ErrorOf(ProfileWith({"  \"features\": [\"fpu\", \"fpu\"],"})),
            "t.json:7:23: features[1]: feature fpu is listed twice");
  EXPECT_THAT(ErrorOf(ProfileWith({"  \"features\": [\"lwp\"],"})),
              StartsWith("t.json:7:16: features[0]: \"lwp\" (CPUID 0x80000001 ECX[15]) follows the "
                         "lwp section"));
}

TEST(Errors, FeatureOrLeafBeyondTheMaxLeaf) {
  // "bmi1" is in leaf 7; line 8 column 16 is the element.
  EXPECT_EQ(ErrorOf(ProfileWith({"  \"max_basic_leaf\": 5,", "  \"features\": [\"bmi1\"],"})),
            "t.json:8:16: features[0] is defined in CPUID leaf 0x7, beyond max_basic_leaf 0x5");
  EXPECT_EQ(ErrorOf(ProfileWith({"  \"max_extended_leaf\": \"0x80000004\",",
                                 "  \"address_sizes\": {\"physical\": 40, \"linear\": 48},"})),
            "t.json:8:3: address_sizes is defined in CPUID leaf 0x80000008, beyond "
            "max_extended_leaf 0x80000004");
  EXPECT_THAT(ErrorOf(ProfileWith({"  \"address_sizes\": {\"physical\": 40, \"linear\": 52},"})),
              StartsWith("t.json:7:37: address_sizes.linear must be 48 or 57"));
}

TEST(Parse, MaxLeavesDefaultToWhatTheProfileDefines) {
  Result<CpuProfile> r =
      parse_profile(ProfileWith({"  \"features\": [\"fpu\", \"bmi1\", \"lm\"],"}), "t.json");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->max_basic_leaf, 7u);
  EXPECT_EQ(r->max_extended_leaf, 0x80000004u);
  EXPECT_EQ(r->features, (std::vector<std::string>{"fpu", "bmi1", "lm"}));
  Result<CpuProfile> m = parse_profile(ProfileWith({}), "t.json");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->max_basic_leaf, 1u);
  EXPECT_TRUE(m->features.empty());
}

TEST(Errors, OverrideSetAndClearOverlapAndBadRegister) {
  //   "cpuid_overrides": [{"leaf": 1, ...   element '{' at column 23, "register" at column 35
  EXPECT_EQ(ErrorOf(ProfileWith({"  \"cpuid_overrides\": [{\"leaf\": 1, \"register\": \"edx\", "
                                 "\"set\": \"0x10\", \"clear\": \"0x30\"}],"})),
            "t.json:7:23: cpuid_overrides[0] sets and clears the same bits 0x10");
  EXPECT_EQ(
      ErrorOf(ProfileWith({"  \"cpuid_overrides\": [{\"leaf\": 1, \"register\": \"rdx\"}],"})),
      "t.json:7:35: cpuid_overrides[0].register must be one of eax, ebx, ecx, edx, got "
      "\"rdx\"");
}

TEST(Errors, CacheGeometry) {
  auto with_cache = [](std::string_view l1d, std::string_view l2) {
    return Lines({"{", "  \"name\": \"t\",", "  \"description\": \"d\",",
                  "  \"vendor\": \"AuthenticAMD\",", "  \"family\": \"0x15\",", "  \"model\": 1,",
                  "  \"cache\": {", l1d, l2, "    \"dram_latency_cycles\": 200", "  }", "}"});
  };
  EXPECT_EQ(ErrorOf(with_cache(
                "    \"l1d\": {\"size_kib\": 24, \"ways\": 4, \"latency_cycles\": 4},",
                "    \"l2\": {\"size_kib\": 1024, \"ways\": 16, \"latency_cycles\": 20},")),
            "t.json:8:5: cache.l1d: 24 KiB in 4 ways of 64-byte lines is not a power-of-two "
            "number of sets");
  EXPECT_EQ(
      ErrorOf(with_cache("    \"l1d\": {\"size_kib\": 16, \"ways\": 4, \"latency_cycles\": 4},",
                         "    \"l2\": {\"size_kib\": 1024, \"ways\": 16, \"latency_cycles\": 3},")),
      "t.json:9:42: cache.l2.latency_cycles (3) must exceed cache.l1d.latency_cycles (4)");
  // The model keeps 16 bytes per line of every level, per vCPU: at most 2^22 lines (256 MiB of
  // cache in 64-byte lines), so a profile (a crafted one in a snapshot too) cannot make each
  // vCPU allocate gigabytes: a 256 MiB L2 with its L1D is over, a 128 MiB one reads.
  EXPECT_EQ(ErrorOf(with_cache(
                "    \"l1d\": {\"size_kib\": 16, \"ways\": 4, \"latency_cycles\": 4},",
                "    \"l2\": {\"size_kib\": 1048576, \"ways\": 16, \"latency_cycles\": 20},")),
            "t.json:7:3: cache: its levels hold 16777472 lines of 64 bytes; the cache model keeps "
            "at most 4194304 (64 MiB per vCPU)");
  EXPECT_EQ(ErrorOf(with_cache(
                "    \"l1d\": {\"size_kib\": 16, \"ways\": 4, \"latency_cycles\": 4},",
                "    \"l2\": {\"size_kib\": 262144, \"ways\": 16, \"latency_cycles\": 20},")),
            "t.json:7:3: cache: its levels hold 4194560 lines of 64 bytes; the cache model keeps "
            "at most 4194304 (64 MiB per vCPU)");
  const Result<CpuProfile> at_limit = parse_profile(
      with_cache("    \"l1d\": {\"size_kib\": 16, \"ways\": 4, \"latency_cycles\": 4},",
                 "    \"l2\": {\"size_kib\": 131072, \"ways\": 16, \"latency_cycles\": 20},"),
      "t.json");
  EXPECT_TRUE(at_limit.ok()) << at_limit.error().message;
}

TEST(Errors, KeysNextToBaselineOf) {
  EXPECT_THAT(
      ErrorOf(Lines({"{", "  \"name\": \"b\",", "  \"description\": \"d\",",
                     "  \"vendor\": \"GenuineIntel\",", "  \"baseline_of\": [\"amd-lwp\"]", "}"})),
      StartsWith("t.json:4:3: vendor is not allowed next to baseline_of"));
}

// Untrusted strings reach the terminal escaped (issue 38 item 4).
TEST(Errors, AnUnknownNameIsShownEscaped) {
  EXPECT_THAT(ErrorOf(Lines({"{", "  \"name\": \"b\",", "  \"description\": \"d\",",
                             "  \"baseline_of\": [\"amd-lwp\", \"x\\u001b[2Jy\"]", "}"})),
              HasSubstr("unknown profile \"x\\x1b[2Jy\""));
}

TEST(Errors, UnknownBaselineMember) {
  //   "baseline_of": ["amd-lwp", "amd-lwp-huge"]    element 1 at column 30
  EXPECT_THAT(ErrorOf(Lines({"{", "  \"name\": \"b\",", "  \"description\": \"d\",",
                             "  \"baseline_of\": [\"amd-lwp\", \"amd-lwp-huge\"]", "}"})),
              StartsWith("t.json:4:30: baseline_of[1]: unknown profile \"amd-lwp-huge\""));
  EXPECT_THAT(ErrorOf(Lines({"{", "  \"name\": \"b\",", "  \"description\": \"d\",",
                             "  \"baseline_of\": [\"amd-lwp\", \"missing.json\"]", "}"}),
                      TempDir() + "/b.json"),
              HasSubstr("/b.json:4:30: baseline_of[1]: cannot read '"));
}

std::string BaselineText(std::string_view name, std::string_view members) {
  return Lines({"{", "  \"name\": \"" + std::string(name) + "\",", "  \"description\": \"d\",",
                "  \"baseline_of\": [" + std::string(members) + "]", "}"});
}

TEST(Errors, CycleInBaselineOf) {
  const std::map<std::string, std::string> texts = {
      {"a", BaselineText("a", "\"b\"")},
      {"b", BaselineText("b", "\"amd-lwp\", \"a\"")},
  };
  const ProfileLookup builtins = builtin_lookup();
  ProfileLookup lookup = [&](std::string_view name) -> std::optional<NamedProfileText> {
    if (auto it = texts.find(std::string(name)); it != texts.end())
      return NamedProfileText{it->first + ".json", it->second};
    return builtins(name);
  };
  // The cycle is found in b.json, at its member "a" (line 4, column 30).
  Result<CpuProfile> r = parse_profile(texts.at("a"), "a.json", lookup);
  EXPECT_EQ(r.error().message, "b.json:4:30: baseline_of[1]: baseline_of cycle a -> b -> a");
  // A profile naming itself: line 4 `  "baseline_of": ["c"]`, element at column 19.
  EXPECT_EQ(ErrorOf(BaselineText("c", "\"c\""), "c.json"),
            "c.json:4:19: baseline_of[0]: baseline_of cycle c -> c");
}

TEST(Errors, MemberErrorsNameTheMembersFile) {
  ProfileLookup lookup = [](std::string_view name) -> std::optional<NamedProfileText> {
    if (name != "bad") return std::nullopt;
    return NamedProfileText{"bad.json", ProfileWith({"  \"steping\": 1,"})};
  };
  Result<CpuProfile> r = parse_profile(BaselineText("set", "\"bad\""), "set.json", lookup);
  EXPECT_THAT(r.error().message, StartsWith("bad.json:7:3: unknown key 'steping'"));
}

TEST(Errors, UnreadableFileAndUnknownBuiltin) {
  EXPECT_EQ(load_profile_file("/nonexistent/x.json").error().message,
            "/nonexistent/x.json: cannot read CPU profile: No such file or directory");
  EXPECT_THAT(builtin_profile("zen9").error().message,
              StartsWith("unknown CPU profile 'zen9' (shipped: "));
  // A file is read up to the size limit, not to its end (/dev/zero has none).
  EXPECT_EQ(load_profile_file("/dev/zero").error().message,
            "/dev/zero: cannot read CPU profile: larger than 1048576 bytes");
}

// A profile that came with a snapshot or a migration stream is data, not a pointer to the
// destination's files: its baseline_of may name shipped profiles only. (A FIFO named there made
// `restore` hang; /dev/zero would be read without end.)
TEST(CpuProfile, EmbeddedProfilesNeverOpenFiles) {
  const std::string crafted =
      R"({"name": "x", "description": "d", "baseline_of": ["amd-lwp", "/dev/zero"]})";
  const Result<CpuProfile> r = parse_embedded_profile(crafted, "the snapshot's CPU profile");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message,
              HasSubstr("baseline_of[1]: a profile inside a snapshot or migration stream "
                        "names no files ('/dev/zero')"));
  const Result<CpuProfile> named = parse_embedded_profile(
      R"({"name": "x", "description": "d", "baseline_of": ["amd-lwp", "amd-lwp-lite"]})", "s");
  EXPECT_TRUE(named.ok()) << named.error().message;
}

// A baseline whose members name each other in a diamond (each of 3 profiles per level names all
// 3 of the next) is parsed once per profile, not once per path: 3^8 parses of the leaves before
// (three 180 KB files of this shape kept `pmuvm profiles` busy for hours, issue 38).
TEST(CpuProfileTest, ADiamondOfBaselinesParsesEachMemberOnce) {
  constexpr int kLevels = 8;
  const std::string leaf = builtin_lookup()("amd-lwp")->text;
  int lookups = 0;
  const ProfileLookup lookup = [&](std::string_view name) -> std::optional<NamedProfileText> {
    ++lookups;
    const std::string n(name);
    const int level = n[1] - 'a';  // "Lc_2": level 2, member 2
    if (level == kLevels) {
      std::string text = leaf;
      text.replace(text.find("\"amd-lwp\""), 9, "\"" + n + "\"");
      return NamedProfileText{n + ".json", text};
    }
    std::string members;
    for (int i = 0; i < 3; ++i)
      members += std::string(i ? ", " : "") + "\"L" + char('a' + level + 1) + "_" +
                 std::to_string(i) + "\"";
    return NamedProfileText{
        n + ".json",
        "{\"name\": \"" + n + "\", \"description\": \"d\", \"baseline_of\": [" + members + "]}"};
  };
  const Result<CpuProfile> r = parse_profile(
      R"({"name": "top", "description": "d", "baseline_of": ["La_0", "La_1", "La_2"]})", "top.json",
      lookup);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(lookups, 3 * (kLevels + 1));
}

}  // namespace
}  // namespace vmm
