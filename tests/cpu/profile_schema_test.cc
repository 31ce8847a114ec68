// The profile's field tables (vmm/cpu/profile_schema.h) as the parser applies them: every number
// one past either end of its range is refused with that range at its path, every required key is
// required, every key is documented in vmm/profiles/README.md, and a profile written from the
// tables reads back equal.
#include "vmm/cpu/profile_schema.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cpu/builtin_profile.h"
#include "vmm/cpu/cpu_profile.h"
#include "vmm/cpu/profile_field_ops.h"
#include "vmm/cpu/profile_fields.h"
#include "vmm/cpu/profile_writer.h"

namespace vmm {
namespace {

namespace schema = profile_schema;
using Json = nlohmann::json;
using ::testing::HasSubstr;
using vmm::testing::Builtin;

// amd-lwp has LWP, address sizes and an L3; the Intel document trades the NetBurst PMU of
// intel-netburst for an architectural one, so that every section is somewhere.
Json AmdDocument() { return Json::parse(to_profile_json(Builtin("amd-lwp"))); }
Json IntelDocument() {
  Json j = Json::parse(to_profile_json(Builtin("intel-netburst")));
  j["netburst"] = nullptr;
  j["max_basic_leaf"] = "0xa";
  j["architectural_pmu"] = Json::object();
  return j;
}

std::string ParseError(const Json& document) {
  const Result<CpuProfile> r = parse_profile(document.dump(2), "t.json");
  return r.ok() ? "(parsed)" : r.error().message;
}

Json::json_pointer Pointer(std::string_view path) {
  std::string p;
  std::stringstream in{std::string(path)};
  for (std::string part; std::getline(in, part, '.');) p += "/" + part;
  return Json::json_pointer(p);
}

template <class S, size_t N>
void CheckRanges(const Json& document, std::string_view path, const schema::Field<S> (&table)[N]) {
  ASSERT_EQ(ParseError(document), "(parsed)");
  schema::for_each_value(
      table,
      [&](const schema::Field<S>& row, auto) {
        const std::string at = ProfileFields::child(path, row.key);
        const bool hex = row.style != schema::Style::kDecimal;
        auto show = [&](uint64_t v) { return hex ? ProfileFields::hex(v) : std::to_string(v); };
        const std::string range =
            row.lo == row.hi ? show(row.lo) : show(row.lo) + ".." + show(row.hi);
        SCOPED_TRACE(at);
        Json j = document;
        j[Pointer(at)] = row.hi + 1;
        EXPECT_THAT(ParseError(j),
                    HasSubstr(at + " must be " + range + ", got " + show(row.hi + 1)));
        if (row.lo > 0) {
          j[Pointer(at)] = row.lo - 1;
          EXPECT_THAT(ParseError(j),
                      HasSubstr(at + " must be " + range + ", got " + show(row.lo - 1)));
        }
        if (row.required) {
          j = document;
          j[Pointer(path.empty() ? std::string_view("") : path)].erase(std::string(row.key));
          EXPECT_THAT(ParseError(j),
                      HasSubstr("missing required key '" + std::string(row.key) + "'"));
        }
      },
      [&](const schema::Field<S>& row, bool S::*) {
        const std::string at = ProfileFields::child(path, row.key);
        SCOPED_TRACE(at);
        Json j = document;
        j[Pointer(at)] = 1;
        EXPECT_THAT(ParseError(j), HasSubstr(at + " must be true or false, got number 1"));
      });
}

TEST(ProfileSchema, EveryNumberAndFlagIsChecked) {
  CheckRanges(AmdDocument(), "", schema::kProfile);
  CheckRanges(AmdDocument(), "address_sizes", schema::kAddressSizes);
  CheckRanges(AmdDocument(), "lwp", schema::kLwp);
  CheckRanges(AmdDocument(), "cache", schema::kCache);
  CheckRanges(AmdDocument(), "cache.l3", schema::kCacheLevel);
  CheckRanges(Json::parse(to_profile_json(Builtin("intel-netburst"))), "netburst",
              schema::kNetburst);
  CheckRanges(IntelDocument(), "architectural_pmu", schema::kArchitecturalPmu);
}

// An unknown key is named with the table's keys, in the table's order.
TEST(ProfileSchema, UnknownKeysListTheTable) {
  Json j = IntelDocument();
  j["architectural_pmu"]["counter"] = 4;
  EXPECT_THAT(
      ParseError(j),
      HasSubstr("unknown key 'counter' in architectural_pmu (known keys: version, counters, "
                "counter_bits, fixed_counters, fixed_counter_bits, modelled_by_pmuvm, pebs, lbr)"));
}

// The tables' rows are what the writer writes: the Intel document with every architectural PMU
// number at the top of its range reads back equal.
TEST(ProfileSchema, WrittenAsDeclared) {
  Json j = IntelDocument();
  j["architectural_pmu"] = {{"version", 5},
                            {"counters", 32},
                            {"counter_bits", 64},
                            {"fixed_counters", 16},
                            {"fixed_counter_bits", 64}};
  const Result<CpuProfile> p = parse_profile(j.dump(), "t.json");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->architectural_pmu, (ArchitecturalPmu{5, 32, 64, 16, 64}));
  const Result<CpuProfile> back = parse_profile(to_profile_json(*p), "back.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  CpuProfile expected = *p;
  expected.source = back->source;
  EXPECT_EQ(*back, expected);
}

std::string Readme() {
  std::ifstream in("vmm/profiles/README.md");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

template <class S, size_t N>
void CheckDocumented(const std::string& readme, const schema::Field<S> (&table)[N]) {
  for (const schema::Field<S>& row : table)
    EXPECT_NE(readme.find("`" + std::string(row.key) + "`"), std::string::npos)
        << "vmm/profiles/README.md does not document `" << row.key << "`";
}

TEST(ProfileSchema, EveryKeyIsDocumented) {
  const std::string readme = Readme();
  ASSERT_THAT(readme, HasSubstr("# CPU profiles"));
  CheckDocumented(readme, schema::kProfile);
  CheckDocumented(readme, schema::kAddressSizes);
  CheckDocumented(readme, schema::kCpuidOverride);
  CheckDocumented(readme, schema::kLwp);
  CheckDocumented(readme, schema::kNetburst);
  CheckDocumented(readme, schema::kArchitecturalPmu);
  CheckDocumented(readme, schema::kCache);
  CheckDocumented(readme, schema::kCacheLevel);
}

}  // namespace
}  // namespace vmm
