#include "vmm/snapshot/snapshot_manifest.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <string>

#include "pmu/rate_limited_interrupt_sink.h"
#include "vmm/cpu/profile_writer.h"
#include "vmm/json/json_text.h"
#include "vmm/machine_limits.h"
#include "vmm/counting_kinds.h"
#include "vmm/printable.h"
#include "vmm/snapshot/file_checksum.h"
#include "vmm/snapshot/state_sections.h"
#include "vmm/result.h"

namespace vmm {
namespace {

constexpr const char* kFormat = "pmuvm-snapshot";

}  // namespace

std::string to_json_text(const SnapshotManifest& m) {
  nlohmann::ordered_json j;
  j["format"] = kFormat;
  j["version"] = kSnapshotFormatVersion;
  j["machine"] = {{"vcpus", m.vcpus},     {"mem_mib", m.mem_mib},
                  {"seed", m.seed},       {"timer_hz", m.timer_hz},
                  {"stepper", m.stepper}, {"guest", m.linux_guest ? "linux" : "bundled"},
                  {"kernel", m.kernel},   {"max_interrupt_rate", m.max_interrupt_rate}};
  nlohmann::ordered_json cpuid = nlohmann::ordered_json::array();
  for (const CpuidEntry& e : m.cpuid)
    cpuid.push_back({e.function, e.index, e.flags, e.eax, e.ebx, e.ecx, e.edx});
  j["cpu"] = {{"profile", nlohmann::ordered_json::parse(to_profile_json(m.profile))},
              {"cpuid", cpuid}};
  nlohmann::ordered_json files = nlohmann::ordered_json::object();
  for (const auto& [name, f] : m.files)
    files[name] = {{"bytes", f.bytes}, {"xxh64", checksum_text(f.checksum)}};
  j["files"] = files;
  return j.dump(2) + "\n";
}

namespace {

using Json = nlohmann::json;

// A field that is missing or does not hold what the manifest format says: `path` names it
// ("machine.vcpus", "cpu.cpuid[3][1]"), `problem` says what is wrong with it.
struct BadField {
  std::string path;
  std::string problem;
};

const Json& member(const Json& object, const std::string& path, const char* key) {
  const std::string child = json_child_path(path, key);
  if (!object.is_object())
    throw BadField{path.empty() ? "the top level" : path, "is not an object"};
  const auto it = object.find(key);
  if (it == object.end()) throw BadField{child, "is missing"};
  return *it;
}

// A JSON number that is a whole, non-negative number fitting T. nlohmann's get<T>() would convert
// whatever it finds: a float by a cast (undefined behaviour past T's range), a larger integer by
// truncation (a vCPU count of 2^32 + 1 read as 1).
template <typename T>
T whole_number(const Json& v, const std::string& path) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() > std::numeric_limits<T>::max())
    throw BadField{
        path, "is not a whole number from 0 to " + std::to_string(std::numeric_limits<T>::max())};
  return static_cast<T>(v.get<uint64_t>());
}

std::string text_field(const Json& v, const std::string& path) {
  if (!v.is_string()) throw BadField{path, "is not a string"};
  return v.get<std::string>();
}

SnapshotManifest read_fields(const Json& j) {
  SnapshotManifest m;
  const Json& machine = member(j, "", "machine");
  auto number = [&](const char* key) -> const Json& { return member(machine, "machine", key); };
  m.vcpus = whole_number<uint32_t>(number("vcpus"), "machine.vcpus");
  m.mem_mib = whole_number<uint64_t>(number("mem_mib"), "machine.mem_mib");
  m.seed = whole_number<uint64_t>(number("seed"), "machine.seed");
  m.timer_hz = whole_number<uint32_t>(number("timer_hz"), "machine.timer_hz");
  m.stepper = text_field(number("stepper"), "machine.stepper");
  const std::string guest = text_field(number("guest"), "machine.guest");
  if (guest != "bundled" && guest != "linux")
    throw BadField{"machine.guest", "is " + in_quotes(guest) + ", not \"bundled\" or \"linux\""};
  m.linux_guest = guest == "linux";
  m.kernel = text_field(number("kernel"), "machine.kernel");
  // Only a name, which the log prints: printable, so a manifest cannot write lines of its own.
  if (m.kernel.size() > 4096 || !std::all_of(m.kernel.begin(), m.kernel.end(), [](char c) {
        return static_cast<unsigned char>(c) >= 0x20 && c != 0x7F;
      }))
    throw BadField{"machine.kernel", "is not a printable name of at most 4096 bytes"};
  m.max_interrupt_rate =
      whole_number<uint32_t>(number("max_interrupt_rate"), "machine.max_interrupt_rate");
  if (!parse_stepper(m.stepper))
    throw BadField{"machine.stepper",
                   "is " + in_quotes(m.stepper) + ", not a stepper this pmuvm has"};
  // The command line's ranges: a manifest cannot ask for a machine `run` could not make.
  if (m.vcpus == 0 || m.vcpus > limits::kMaxVcpus)
    throw BadField{"machine.vcpus", "is " + std::to_string(m.vcpus) + ", not 1.." +
                                        std::to_string(limits::kMaxVcpus)};
  if (m.mem_mib < limits::kMinMemMib || m.mem_mib > limits::kMaxMemMib)
    throw BadField{"machine.mem_mib", "is " + std::to_string(m.mem_mib) + ", not " +
                                          std::to_string(limits::kMinMemMib) + ".." +
                                          std::to_string(limits::kMaxMemMib)};
  if (m.timer_hz > limits::kMaxTimerHz)
    throw BadField{"machine.timer_hz", "is " + std::to_string(m.timer_hz) + ", not 0.." +
                                           std::to_string(limits::kMaxTimerHz)};
  if (m.max_interrupt_rate > pmu::RateLimitedInterruptSink::kMaxLimit)
    throw BadField{"machine.max_interrupt_rate",
                   "is " + std::to_string(m.max_interrupt_rate) + ", over the limit of " +
                       std::to_string(pmu::RateLimitedInterruptSink::kMaxLimit)};
  const Json& cpu = member(j, "", "cpu");
  Result<CpuProfile> profile =
      parse_embedded_profile(member(cpu, "cpu", "profile").dump(), "the snapshot's CPU profile");
  if (!profile.ok()) throw BadField{"cpu.profile", "does not load: " + profile.error().message};
  m.profile = std::move(*profile);
  const Json& cpuid = member(cpu, "cpu", "cpuid");
  if (!cpuid.is_array()) throw BadField{"cpu.cpuid", "is not an array"};
  for (size_t i = 0; i < cpuid.size(); ++i) {
    const std::string path = json_element_path("cpu.cpuid", i);
    if (!cpuid[i].is_array() || cpuid[i].size() != 7) throw BadField{path, "is not 7 numbers"};
    uint32_t n[7];
    for (size_t k = 0; k < 7; ++k)
      n[k] = whole_number<uint32_t>(cpuid[i][k], json_element_path(path, k));
    m.cpuid.push_back(CpuidEntry{n[0], n[1], n[2], n[3], n[4], n[5], n[6]});
  }
  if (!j.contains("files")) return m;
  const Json& files = member(j, "", "files");
  if (!files.is_object()) throw BadField{"files", "is not an object"};
  for (const auto& [name, f] : files.items()) {
    const std::string path = json_child_path("files", name);
    const std::optional<uint64_t> checksum =
        parse_checksum_text(text_field(member(f, path, "xxh64"), path + ".xxh64"));
    if (!checksum) throw BadField{path + ".xxh64", "is not 16 hex digits"};
    m.files[name] = SnapshotManifest::File{
        whole_number<uint64_t>(member(f, path, "bytes"), path + ".bytes"), *checksum};
  }
  return m;
}

}  // namespace

Result<SnapshotManifest> parse_manifest(const std::string& text) {
  // The manifest embeds the profile two levels down; deeper is crafted and refused while parsing.
  constexpr JsonLimits kLimits{.max_bytes = kMaxManifestBytes,
                               .max_depth = kProfileJsonLimits.max_depth + 2};
  const Result<Json> document = read_json_text(text, kLimits);
  if (!document.ok()) return document.error().prefixed("at ");
  const Json& j = document.value();
  if (!j.is_object()) return Error::usage(std::string("the manifest is not a JSON object"));
  // find(), not value(): value() throws type_error for a "format" that is no string.
  const auto format = j.find("format");
  if (format == j.end() || !format->is_string() || format->get<std::string>() != kFormat)
    return Error::usage(std::string("not a pmuvm snapshot (format is not \"") + kFormat + "\")");
  if (!j.contains("version") || !j["version"].is_number_unsigned())
    return Error::usage(std::string("the manifest has no format version"));
  if (j["version"].get<uint64_t>() != kSnapshotFormatVersion)
    return Error::usage("snapshot format version " + std::to_string(j["version"].get<uint64_t>()) +
                        " (this pmuvm reads version " + std::to_string(kSnapshotFormatVersion) +
                        ")");
  try {
    return read_fields(j);
  } catch (const BadField& bad) {
    return Error::usage(bad.path + " (at " + line_column(text, locate_json_path(text, bad.path)) +
                        ") " + bad.problem);
  } catch (const nlohmann::json::exception& e) {  // a check above missed a type: still a refusal
    return Error::usage(std::string("the manifest does not read: ") + e.what());
  }
}

}  // namespace vmm
