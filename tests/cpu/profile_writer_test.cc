// to_profile_json (vmm/cpu/profile_writer.h) and compute_baseline (vmm/cpu/profile_baseline.h):
// every profile the parser or the baseline computation produces is written as a literal profile
// that parses back to an equal CpuProfile (apart from `source`, where it was read from).
#include "vmm/cpu/profile_writer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "pmu/lwp/architecture.h"
#include "tests/cpu/builtin_profile.h"
#include "tests/cpu/profile_text.h"
#include "vmm/cpu/cpu_profile.h"
#include "vmm/cpu/profile_baseline.h"

namespace vmm {
namespace {

using ::testing::HasSubstr;
using vmm::testing::Builtin;
using vmm::testing::Lines;
using vmm::testing::ProfileWith;
namespace msr0 = pmu::lwp::msr0;

CpuProfile Parsed(const std::string& text) {
  Result<CpuProfile> r = parse_profile(text, "t.json");
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? *r : CpuProfile{};
}

CpuProfile Baseline(const std::vector<std::string>& names) {
  std::vector<CpuProfile> members;
  for (const std::string& n : names) members.push_back(Builtin(n));
  Result<CpuProfile> r = compute_baseline(members);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? *r : CpuProfile{};
}

// Writes `p`, reads it back, and checks that nothing but `source` changed.
void ExpectRoundTrip(const CpuProfile& p) {
  const std::string text = to_profile_json(p);
  Result<CpuProfile> back = parse_profile(text, "written.json");
  ASSERT_TRUE(back.ok()) << back.error().message << "\n" << text;
  EXPECT_EQ(back->source, "written.json");
  back->source = p.source;
  EXPECT_EQ(to_profile_json(*back), text);  // readable diff when the next line fails
  EXPECT_TRUE(*back == p) << text;
}

TEST(ProfileWriter, EveryShippedProfileRoundTrips) {
  for (const std::string& name : builtin_profile_names()) {
    SCOPED_TRACE(name);
    ExpectRoundTrip(Builtin(name));
  }
}

// The brand a profile without one gets ("pmuvm " + its name) fits CPUID's 47 characters also for
// the longest name (64): before, it was 70 characters, written out as such, and refused when read
// back — a snapshot or migration of such a VM could not be restored (manifest_fuzz found it).
TEST(ProfileWriter, TheDefaultBrandOfALongNameRoundTrips) {
  const std::string name(64, 'n');
  std::string text = ProfileWith({});
  text.replace(text.find("\"name\": \"t\""), 11, "\"name\": \"" + name + "\"");
  const CpuProfile p = Parsed(text);
  EXPECT_EQ(p.brand, ("pmuvm " + name).substr(0, 47));
  ExpectRoundTrip(p);
}

TEST(ProfileWriter, ComputedBaselinesRoundTrip) {
  ExpectRoundTrip(Baseline({"amd-lwp", "amd-lwp-lite"}));
  ExpectRoundTrip(Baseline({"amd-lwp-lite", "amd-lwp"}));
  ExpectRoundTrip(Baseline({"amd-lwp", "intel-netburst"}));  // no LWP, no NetBurst survives
  ExpectRoundTrip(Baseline({"intel-netburst"}));
}

TEST(ProfileWriter, WhatTheDefaultsWouldHideIsWrittenOut) {
  // Interrupt offered but not enabled (the vector is then meaningless and held as 0), an empty
  // policy, overrides with notes, no address sizes, a reduced NetBurst PMU.
  ExpectRoundTrip(Parsed(ProfileWith(
      {"  \"lwp\": {\"interrupt\": true, \"events\": [\"IRE\", \"BRE\"], \"max_events\": 2, "
       "\"cache_max_bits\": 12, \"enable_policy\": [\"EN\", \"BRE\"]},"})));
  ExpectRoundTrip(
      Parsed(ProfileWith({"  \"lwp\": {\"events\": [\"IRE\"], \"max_events\": 1, "
                          "\"enable_policy\": []},"})));
  ExpectRoundTrip(Parsed(ProfileWith(
      {"  \"cpuid_overrides\": [{\"leaf\": \"0x80000001\", \"register\": \"ecx\", \"set\": 4, "
       "\"note\": \"SVM \\\"on\\\"\"}, {\"leaf\": 7, \"subleaf\": 1, \"register\": \"eax\", "
       "\"clear\": \"0xffffffff\"}],",
       "  \"misc_enable\": \"0xffffffffffffffff\",",
       "  \"netburst\": {\"counters\": 8, \"counter_bits\": 32, \"threads_per_core\": 2},"})));
  ExpectRoundTrip(Parsed(ProfileWith({})));
}

TEST(ProfileWriter, TextIsTheDocumentedSchema) {
  const nlohmann::json j = nlohmann::json::parse(to_profile_json(Builtin("amd-lwp")));
  EXPECT_EQ(j["family"], "0x15");
  EXPECT_EQ(j["model"], "0x1");
  EXPECT_EQ(j["stepping"], 2);
  EXPECT_EQ(j["lwp"]["events"], (nlohmann::json{"IRE", "BRE", "DME"}));
  EXPECT_EQ(j["lwp"]["enable_policy"], (nlohmann::json{"EN", "IRE", "BRE", "DME", "INT"}));
  EXPECT_EQ(j["lwp"]["interrupt_vector"], "0xf0");
  EXPECT_TRUE(j["netburst"].is_null());
  EXPECT_FALSE(j.contains("computed_from"));
  const nlohmann::json n = nlohmann::json::parse(to_profile_json(Builtin("intel-netburst")));
  EXPECT_TRUE(n["lwp"].is_null());
  EXPECT_EQ(n["misc_enable"], "0x1880");
}

TEST(ComputeBaseline, EqualsTheShippedBaselineProfile) {
  CpuProfile computed = Baseline({"amd-lwp", "amd-lwp-lite"});
  EXPECT_EQ(computed.name, "baseline-of-amd-lwp-amd-lwp-lite");
  EXPECT_EQ(computed.baseline_of, (std::vector<std::string>{"amd-lwp", "amd-lwp-lite"}));
  EXPECT_EQ(computed.source, "");
  EXPECT_EQ(computed.lwp_enable_policy, msr0::kEnabled | msr0::kIre);
  const CpuProfile shipped = Builtin("amd-lwp-baseline");
  computed.name = shipped.name;
  computed.description = shipped.description;
  computed.source = shipped.source;
  EXPECT_TRUE(computed == shipped);
}

TEST(ComputeBaseline, NamesAndErrors) {
  EXPECT_EQ(Baseline({"amd-lwp", "amd-lwp-lite", "amd-lwp", "amd-lwp-lite"}).name,
            "baseline-of-amd-lwp-amd-lwp-lite-amd-lwp-amd-lwp-lite");  // 53 characters
  EXPECT_EQ(Baseline({"amd-lwp", "amd-lwp-lite", "amd-lwp", "amd-lwp-lite", "amd-lwp-lite"}).name,
            "baseline-of-5-profiles");  // the joined name would have 66 characters
  EXPECT_EQ(compute_baseline({}).error().message, "a baseline needs at least one profile");
}

TEST(ProfileWriter, ComputedFromIsInformationOnly) {
  const CpuProfile p = Parsed(ProfileWith({"  \"computed_from\": [\"x\", \"y\"],"}));
  EXPECT_EQ(p.baseline_of, (std::vector<std::string>{"x", "y"}));
  Result<CpuProfile> empty = parse_profile(ProfileWith({"  \"computed_from\": [\"\"],"}), "t.json");
  EXPECT_EQ(empty.error().message, "t.json:7:21: computed_from[0] must not be empty");
  Result<CpuProfile> both = parse_profile(
      Lines({"{", "  \"name\": \"b\",", "  \"description\": \"d\",",
             "  \"computed_from\": [\"amd-lwp\"],", "  \"baseline_of\": [\"amd-lwp\"]", "}"}),
      "t.json");
  EXPECT_THAT(both.error().message,
              HasSubstr("t.json:4:3: computed_from is not allowed next to baseline_of"));
}

}  // namespace
}  // namespace vmm
