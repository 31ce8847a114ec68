#include "vmm/snapshot/snapshot_manifest.h"

#include <nlohmann/json.hpp>

#include <limits>
#include <string>

#include "pmu/rate_limited_interrupt_sink.h"
#include "vmm/cpu/json_document.h"
#include "vmm/cpu/profile_writer.h"
#include "vmm/json_nesting_limit.h"
#include "vmm/snapshot/file_checksum.h"
#include "vmm/snapshot/state_sections.h"

namespace vmm {
namespace {

constexpr const char* kFormat = "pmuvm-snapshot";

}  // namespace

std::string to_json_text(const SnapshotManifest& m) {
  nlohmann::ordered_json j;
  j["format"] = kFormat;
  j["version"] = kSnapshotFormatVersion;
  j["machine"] = {{"vcpus", m.vcpus},       {"mem_mib", m.mem_mib},
                  {"seed", m.seed},         {"timer_hz", m.timer_hz},
                  {"stepper", m.stepper},   {"guest", m.linux_guest ? "linux" : "bundled"},
                  {"kernel", m.kernel},     {"max_interrupt_rate", m.max_interrupt_rate}};
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

// A JSON number that is a whole, non-negative number fitting T. nlohmann's get<T>() would convert
// whatever it finds: a float by a cast (undefined behaviour past T's range), a larger integer by
// truncation (a vCPU count of 2^32 + 1 read as 1). Anything else is the type_error that
// parse_manifest reports as a field of the wrong type.
template <typename T>
T whole_number(const nlohmann::json& v) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() > std::numeric_limits<T>::max())
    throw nlohmann::json::type_error::create(302, "not a whole number in range", &v);
  return static_cast<T>(v.get<uint64_t>());
}

}  // namespace

std::variant<SnapshotManifest, std::string> parse_manifest(const std::string& text) {
  // The manifest embeds the profile (as deep as a profile file may be, kMaxJsonDepth) two
  // levels down. Deeper is crafted: it is refused while parsing.
  constexpr size_t kMaxLevels = kMaxJsonDepth + 3;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text, json_nesting_limit(kMaxLevels), /*allow_exceptions=*/false);
  } catch (const JsonTooDeep&) {
    return "the manifest nests deeper than " + std::to_string(kMaxLevels) + " levels";
  }
  if (j.is_discarded() || !j.is_object()) return std::string("the manifest is not a JSON object");
  if (j.value("format", std::string()) != kFormat)
    return std::string("not a pmuvm snapshot (format is not \"") + kFormat + "\")";
  if (!j.contains("version") || !j["version"].is_number_unsigned())
    return std::string("the manifest has no format version");
  if (j["version"].get<uint64_t>() != kSnapshotFormatVersion)
    return "snapshot format version " + std::to_string(j["version"].get<uint64_t>()) +
           " (this pmuvm reads version " + std::to_string(kSnapshotFormatVersion) + ")";
  SnapshotManifest m;
  try {
    const nlohmann::json& machine = j.at("machine");
    m.vcpus = whole_number<uint32_t>(machine.at("vcpus"));
    m.mem_mib = whole_number<uint64_t>(machine.at("mem_mib"));
    m.seed = whole_number<uint64_t>(machine.at("seed"));
    m.timer_hz = whole_number<uint32_t>(machine.at("timer_hz"));
    m.stepper = machine.at("stepper").get<std::string>();
    const std::string guest = machine.at("guest").get<std::string>();
    if (guest != "bundled" && guest != "linux") return "unknown guest kind \"" + guest + "\"";
    m.linux_guest = guest == "linux";
    m.kernel = machine.at("kernel").get<std::string>();
    m.max_interrupt_rate = whole_number<uint32_t>(machine.at("max_interrupt_rate"));
    if (m.stepper != "kvm" && m.stepper != "kvm-single" && m.stepper != "guest" &&
        m.stepper != "none")
      return "unknown stepper \"" + m.stepper + "\"";
    if (m.vcpus == 0 || m.vcpus > 64 || m.mem_mib == 0 || m.mem_mib > (1u << 20))
      return std::string("the machine's vCPU count or memory size is out of range");
    if (m.max_interrupt_rate > pmu::RateLimitedInterruptSink::kMaxLimit)
      return "the machine's max_interrupt_rate " + std::to_string(m.max_interrupt_rate) +
             " is over the limit of " + std::to_string(pmu::RateLimitedInterruptSink::kMaxLimit);
    ProfileResult profile =
        parse_embedded_profile(j.at("cpu").at("profile").dump(), "the snapshot's CPU profile");
    if (!profile.ok()) return profile.error;
    m.profile = std::move(*profile.profile);
    for (const nlohmann::json& e : j.at("cpu").at("cpuid")) {
      if (!e.is_array() || e.size() != 7) return std::string("a CPUID entry is not 7 numbers");
      m.cpuid.push_back(CpuidEntry{whole_number<uint32_t>(e[0]), whole_number<uint32_t>(e[1]),
                                   whole_number<uint32_t>(e[2]), whole_number<uint32_t>(e[3]),
                                   whole_number<uint32_t>(e[4]), whole_number<uint32_t>(e[5]),
                                   whole_number<uint32_t>(e[6])});
    }
    if (j.contains("files"))
      for (const auto& [name, f] : j.at("files").items()) {
        const std::optional<uint64_t> checksum =
            parse_checksum_text(f.at("xxh64").get<std::string>());
        if (!checksum)
          return "the manifest's checksum of " + name + " is not 16 hex digits";
        m.files[name] = SnapshotManifest::File{whole_number<uint64_t>(f.at("bytes")), *checksum};
      }
  } catch (const nlohmann::json::exception&) {
    // Which field: the exception text is nlohmann's; ours names the part.
    return std::string("the manifest lacks a field or has one of the wrong type (machine, cpu, "
                       "files)");
  }
  return m;
}

}  // namespace vmm
