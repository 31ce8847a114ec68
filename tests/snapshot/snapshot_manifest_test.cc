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
  return !parsed.ok() ? parsed.error().message : "";
}

TEST(SnapshotManifest, TheGoldenManifestReads) { EXPECT_EQ(error_with("{", "{"), ""); }

// Each refusal names the field by its path and the line:column of its key in the text.
TEST(SnapshotManifest, NumbersMustBeWholeAndFitTheirField) {
  const std::string vcpus = "machine.vcpus (at 5:5) is not a whole number from 0 to 4294967295";
  EXPECT_EQ(error_with("\"vcpus\": 1,", "\"vcpus\": 4294967297,"), vcpus);  // was read as 1
  EXPECT_EQ(error_with("\"vcpus\": 1,", "\"vcpus\": 1.98741e+47,"), vcpus);
  EXPECT_EQ(error_with("\"vcpus\": 1,", "\"vcpus\": 1.0,"), vcpus);
  EXPECT_EQ(error_with("\"vcpus\": 1,", "\"vcpus\": -1,"), vcpus);
  EXPECT_EQ(error_with("\"timer_hz\": 100,", "\"timer_hz\": 1.5,"),
            "machine.timer_hz (at 8:5) is not a whole number from 0 to 4294967295");
  EXPECT_EQ(error_with("\"mem_mib\": 256,", "\"mem_mib\": 2.56e2,"),
            "machine.mem_mib (at 6:5) is not a whole number from 0 to 18446744073709551615");
  EXPECT_EQ(error_with("\"seed\": 1,", "\"seed\": 18446744073709551616,"),
            "machine.seed (at 7:5) is not a whole number from 0 to 18446744073709551615");
  EXPECT_EQ(
      error_with("\"cpuid\": [\n      [\n        0,", "\"cpuid\": [\n      [\n        4294967296,"),
      "cpu.cpuid[0][0] (at 123:9) is not a whole number from 0 to 4294967295");
  EXPECT_EQ(error_with("\"vcpus\": 1,", "\"vcpus\": 2,"), "");  // a whole number in range reads
}

// The command line's ranges hold for a manifest too (a crafted one asked for 64 vCPUs and 1 TiB).
TEST(SnapshotManifest, TheMachineIsOneTheCommandLineCouldMake) {
  EXPECT_EQ(error_with("\"vcpus\": 1,", "\"vcpus\": 16,"), "");
  EXPECT_EQ(error_with("\"vcpus\": 1,", "\"vcpus\": 17,"),
            "machine.vcpus (at 5:5) is 17, not 1..16");
  EXPECT_EQ(error_with("\"vcpus\": 1,", "\"vcpus\": 0,"), "machine.vcpus (at 5:5) is 0, not 1..16");
  EXPECT_EQ(error_with("\"mem_mib\": 256,", "\"mem_mib\": 65537,"),
            "machine.mem_mib (at 6:5) is 65537, not 4..65536");
  EXPECT_EQ(error_with("\"mem_mib\": 256,", "\"mem_mib\": 1048576,"),
            "machine.mem_mib (at 6:5) is 1048576, not 4..65536");
  EXPECT_EQ(error_with("\"mem_mib\": 256,", "\"mem_mib\": 3,"),
            "machine.mem_mib (at 6:5) is 3, not 4..65536");
  EXPECT_EQ(error_with("\"timer_hz\": 100,", "\"timer_hz\": 10001,"),
            "machine.timer_hz (at 8:5) is 10001, not 0..10000");
}

// The kernel's name is printed in the log: a manifest cannot bring its own lines or escapes.
TEST(SnapshotManifest, TheKernelNameIsPrintable) {
  EXPECT_EQ(error_with("\"kernel\": \"", "\"kernel\": \"x\\npmuvm: [info] forged"),
            "machine.kernel (at 11:5) is not a printable name of at most 4096 bytes");
  EXPECT_EQ(error_with("\"kernel\": \"", "\"kernel\": \"\\u001b[2J"),
            "machine.kernel (at 11:5) is not a printable name of at most 4096 bytes");
  EXPECT_EQ(error_with("\"kernel\": \"", "\"kernel\": \"/boot/k\u00e9rnel "), "");
}

// "format" of another type is not a pmuvm snapshot either: json::value() threw type_error out of
// parse_manifest (std::terminate: a crafted migration hello ended the destination; manifest_fuzz).
TEST(SnapshotManifest, AFormatOfAnotherTypeIsForeign) {
  for (const char* format : {"7", "null", "[]", "{}"})
    EXPECT_EQ(error_with("\"format\": \"pmuvm-snapshot\"", std::string("\"format\": ") + format),
              "not a pmuvm snapshot (format is not \"pmuvm-snapshot\")");
}

TEST(SnapshotManifest, MissingAndMistypedFieldsAreNamed) {
  EXPECT_EQ(error_with("\"seed\": 1,", ""), "machine.seed (at 4:3) is missing");
  EXPECT_EQ(error_with("\"guest\": \"bundled\"", "\"guest\": true"),
            "machine.guest (at 10:5) is not a string");
  EXPECT_EQ(error_with("\"xxh64\": \"", "\"xxh64\": \"z"),
            "files.memory.bin.xxh64 (at 253:7) is not 16 hex digits");
  EXPECT_EQ(error_with("\"vcpus\": 1,", "\"vcpus\": 1,,"),
            "at 5:16: JSON syntax error while parsing object key - unexpected ','; expected "
            "string literal");
  EXPECT_EQ(error_with("\"vcpus\": 1,", "\"vcpus\": 1, \"vcpus\": 1,"),
            "at 5:17: duplicate key machine.vcpus (JSON would silently keep only the last one)");
}

}  // namespace
}  // namespace vmm
