// A snapshot's manifest.json (and a migration's hello) read from crafted text: every number must
// be a whole number that fits its field. nlohmann's get<uint32_t>() converts silently — a vCPU
// count of 2^32 + 1 became 1, a float was cast (undefined behaviour for 1e47: manifest_fuzz).
#include "vmm/snapshot/snapshot_manifest.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <variant>

namespace vmm {
namespace {

std::string golden_manifest() {
  std::ifstream in("tests/snapshot/golden/lwp_kvm.manifest.json");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The golden manifest with the first `from` replaced by `to`, parsed: its error, or "" when read.
std::string error_with(const std::string& from, const std::string& to) {
  std::string text = golden_manifest();
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at == std::string::npos) return "(not found)";
  text.replace(at, from.size(), to);
  auto parsed = parse_manifest(text);
  return std::holds_alternative<std::string>(parsed) ? std::get<std::string>(parsed) : "";
}

TEST(SnapshotManifest, TheGoldenManifestReads) { EXPECT_EQ(error_with("{", "{"), ""); }

TEST(SnapshotManifest, NumbersMustBeWholeAndFitTheirField) {
  const std::string wrong =
      "the manifest lacks a field or has one of the wrong type (machine, cpu, files)";
  EXPECT_EQ(error_with("\"vcpus\": 1,", "\"vcpus\": 4294967297,"), wrong);  // was read as 1
  EXPECT_EQ(error_with("\"vcpus\": 1,", "\"vcpus\": 1.98741e+47,"), wrong);
  EXPECT_EQ(error_with("\"vcpus\": 1,", "\"vcpus\": 1.0,"), wrong);
  EXPECT_EQ(error_with("\"vcpus\": 1,", "\"vcpus\": -1,"), wrong);
  EXPECT_EQ(error_with("\"timer_hz\": 100,", "\"timer_hz\": 1.5,"), wrong);
  EXPECT_EQ(error_with("\"mem_mib\": 256,", "\"mem_mib\": 2.56e2,"), wrong);
  EXPECT_EQ(error_with("\"seed\": 1,", "\"seed\": 18446744073709551616,"), wrong);
  EXPECT_EQ(error_with("\"cpuid\": [\n      [\n        0,", "\"cpuid\": [\n      [\n        4294967296,"),
            wrong);
  EXPECT_EQ(error_with("\"vcpus\": 1,", "\"vcpus\": 2,"), "");  // a whole number in range reads
}

}  // namespace
}  // namespace vmm
