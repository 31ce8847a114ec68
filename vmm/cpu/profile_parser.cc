#include "vmm/cpu/profile_parser.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "pmu/lwp/architecture.h"
#include "pmu/lwp/capabilities.h"
#include "vmm/cpu/arch_pmu_config.h"
#include "vmm/cpu/cpuid_features.h"
#include "vmm/cpu/lwp_profile_names.h"
#include "vmm/cpu/profile_field_ops.h"
#include "vmm/cpu/profile_baseline.h"
#include "vmm/cpu/profile_fields.h"
#include "vmm/cpu/profile_schema.h"
#include "vmm/json/json_text.h"
#include "vmm/printable.h"
#include "vmm/result.h"

namespace vmm::detail {
namespace {

using Json = nlohmann::json;
namespace lwp = pmu::lwp;
namespace schema = profile_schema;

constexpr size_t kMaxBaselineDepth = 16;  // nesting of baseline_of; real sets need 1 or 2
constexpr uint8_t kDefaultLwpVector = 0xF0;
constexpr uint64_t kMiscEnablePerfmonAvailable = 1ull << 7;
constexpr uint64_t kMiscEnableBtsUnavailable = 1ull << 11;
constexpr uint64_t kMiscEnablePebsUnavailable = 1ull << 12;
constexpr size_t kMaxBrandLength = 47;  // 48 bytes in CPUID 0x80000002..4, NUL-terminated
constexpr uint32_t kExtendedBase = 0x80000000;
constexpr uint32_t kBrandLastLeaf = 0x80000004;
constexpr uint32_t kAddressSizesLeaf = 0x80000008;

bool printable_ascii(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c <= 0x7E; });
}

bool power_of_two(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// Pops the frame that ProfileParser pushed, also when parsing fails by exception.
class FrameGuard {
 public:
  FrameGuard(ParseContext& ctx, ParseFrame frame) : ctx_(ctx) {
    ctx_.frames.push_back(std::move(frame));
  }
  ~FrameGuard() { ctx_.frames.pop_back(); }
  FrameGuard(const FrameGuard&) = delete;
  FrameGuard& operator=(const FrameGuard&) = delete;

 private:
  ParseContext& ctx_;
};

class ProfileParser {
 public:
  ProfileParser(std::string_view source, std::string_view text, ParseContext& ctx,
                std::vector<std::string> identity_keys)
      : r_(source, text), source_(source), ctx_(ctx), identity_keys_(std::move(identity_keys)) {}

  CpuProfile parse(const Json& root) {
    r_.expect_object(root, "");
    CpuProfile p;
    p.source = source_;
    p.name = parse_name(root);
    identity_keys_.push_back("name:" + p.name);
    FrameGuard frame(ctx_, ParseFrame{identity_keys_, p.name});
    if (ctx_.frames.size() > kMaxBaselineDepth)
      r_.fail("baseline_of",
              "baseline_of nests deeper than " + std::to_string(kMaxBaselineDepth) + " profiles");
    if (ProfileFields::optional(root, "baseline_of") != nullptr) return parse_baseline(root, p);
    return parse_literal(root, p);
  }

 private:
  std::string parse_name(const Json& root) {
    const std::string name = r_.string(r_.required(root, "", "name"), "name");
    const bool ok =
        !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
        });
    if (!ok)
      r_.fail("name",
              "name must be 1..64 characters from A-Z a-z 0-9 . _ -, got " + in_quotes(name));
    return name;
  }

  // ---- literal profiles ----------------------------------------------------------------------

  CpuProfile parse_literal(const Json& root, CpuProfile& p) {
    r_.check_keys(root, "", schema::keys(schema::kProfile));
    p.description = r_.string(r_.required(root, "", "description"), "description");
    parse_identity(root, p);
    parse_overrides(root, p);
    if (const Json* v = ProfileFields::nullable(root, "misc_enable"))
      p.misc_enable =
          r_.unsigned_value(*v, "misc_enable", 0, std::numeric_limits<uint64_t>::max(), true);
    parse_lwp(root, p);
    parse_netburst(root, p);
    parse_cache(r_.required(root, "", "cache"), p.cache);
    parse_cpuid_definition(root, p);
    parse_architectural_pmu(root, p);
    parse_computed_from(root, p);
    return p;
  }

  // A baseline written out as a literal profile (profile_writer.h) names its members here, for
  // `pmuvm profiles` to show; nothing is computed from them.
  void parse_computed_from(const Json& root, CpuProfile& p) {
    const Json* list = ProfileFields::optional(root, "computed_from");
    if (list == nullptr) return;
    r_.expect_array(*list, "computed_from");
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string path = ProfileFields::element("computed_from", i);
      p.baseline_of.push_back(r_.string((*list)[i], path));
      if (p.baseline_of.back().empty()) r_.fail(path, path + " must not be empty");
    }
  }

  // max_basic_leaf, max_extended_leaf, features, address_sizes (after lwp: the LWP leaf needs
  // the extended range to reach it).
  void parse_cpuid_definition(const Json& root, CpuProfile& p) {
    // (leaf, path) of everything the profile defines beyond leaf 1 and the brand (features,
    // address sizes, the LWP leaf), to check it against the max leaves afterwards.
    std::vector<std::pair<uint32_t, std::string>> leaves;
    if (const Json* list = ProfileFields::optional(root, "features")) {
      r_.expect_array(*list, "features");
      for (size_t i = 0; i < list->size(); ++i) {
        const std::string path = ProfileFields::element("features", i);
        const std::string name = r_.string((*list)[i], path);
        const CpuidFeature* f = find_cpuid_feature(name);
        if (f == nullptr)
          r_.fail(path, path + ": unknown CPUID feature " + in_quotes(name) +
                            " (the names are listed in vmm/profiles/README.md)");
        if (name == "lwp")
          r_.fail(path, path +
                            ": \"lwp\" (CPUID 0x80000001 ECX[15]) follows the lwp section; "
                            "do not list it");
        if (p.has_feature(name)) r_.fail(path, path + ": feature " + name + " is listed twice");
        p.features.push_back(name);
        leaves.emplace_back(f->leaf, path);
      }
    }
    if (const Json* v = ProfileFields::nullable(root, "address_sizes")) {
      r_.expect_object(*v, "address_sizes");
      r_.check_keys(*v, "address_sizes", schema::keys(schema::kAddressSizes));
      AddressSizes a;
      schema::read(r_, *v, "address_sizes", schema::kAddressSizes, a);
      // KVM_SET_CPUID2 refuses other linear widths (its canonical-address checks know 48 and 57).
      if (a.linear != 48 && a.linear != 57)
        r_.fail("address_sizes.linear",
                "address_sizes.linear must be 48 or 57 (4- or 5-level "
                "paging), got " +
                    std::to_string(a.linear));
      p.address_sizes = a;
      leaves.emplace_back(kAddressSizesLeaf, "address_sizes");
    }
    if (p.lwp.available) leaves.emplace_back(lwp::kCpuidLwpLeaf, "lwp");

    // Defaults: just high enough for what the profile defines.
    p.max_basic_leaf = 1;
    p.max_extended_leaf = kBrandLastLeaf;
    for (const auto& [leaf, path] : leaves) {
      uint32_t& max = leaf >= kExtendedBase ? p.max_extended_leaf : p.max_basic_leaf;
      max = std::max(max, leaf);
    }
    if (const Json* v = ProfileFields::optional(root, "max_basic_leaf"))
      p.max_basic_leaf =
          static_cast<uint32_t>(r_.unsigned_value(*v, "max_basic_leaf", 1, 0xFF, true));
    if (const Json* v = ProfileFields::optional(root, "max_extended_leaf"))
      p.max_extended_leaf = static_cast<uint32_t>(
          r_.unsigned_value(*v, "max_extended_leaf", kBrandLastLeaf, kExtendedBase + 0xFF, true));
    for (const auto& [leaf, path] : leaves) {
      const bool extended = leaf >= kExtendedBase;
      const uint32_t max = extended ? p.max_extended_leaf : p.max_basic_leaf;
      if (leaf > max)
        r_.fail(path, path + " is defined in CPUID leaf " + ProfileFields::hex(leaf) + ", beyond " +
                          (extended ? "max_extended_leaf " : "max_basic_leaf ") +
                          ProfileFields::hex(max));
    }
  }

  void parse_identity(const Json& root, CpuProfile& p) {
    p.vendor = r_.string(r_.required(root, "", "vendor"), "vendor");
    if (p.vendor.size() != 12 || !printable_ascii(p.vendor))
      r_.fail("vendor",
              "vendor must be exactly 12 printable ASCII characters (CPUID 0 EBX, EDX, "
              "ECX), got " +
                  in_quotes(p.vendor));
    schema::read(r_, root, "", schema::kProfile, p);  // family, model, stepping
    if (p.model > 0xF && p.family != 0x6 && p.family < 0xF)
      r_.fail("model", "model " + ProfileFields::hex(p.model) +
                           " needs CPUID's extended model field, "
                           "which only families 0x6 and 0xf and above use; family " +
                           ProfileFields::hex(p.family) + " allows models 0x0..0xf");
    // Without a brand of its own a profile shows "pmuvm NAME", cut to what CPUID holds (a name
    // may be 64 characters): a longer default was written out and then refused when read back.
    p.brand = ("pmuvm " + p.name).substr(0, kMaxBrandLength);
    if (const Json* v = ProfileFields::optional(root, "brand")) {
      p.brand = r_.string(*v, "brand");
      if (p.brand.size() > kMaxBrandLength || !printable_ascii(p.brand))
        r_.fail("brand",
                "brand must be at most 47 printable ASCII characters (CPUID "
                "0x80000002..4), got " +
                    std::to_string(p.brand.size()) + " characters");
    }
  }

  void parse_overrides(const Json& root, CpuProfile& p) {
    const Json* list = ProfileFields::optional(root, "cpuid_overrides");
    if (list == nullptr) return;
    r_.expect_array(*list, "cpuid_overrides");
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string path = ProfileFields::element("cpuid_overrides", i);
      const Json& o = (*list)[i];
      r_.expect_object(o, path);
      r_.check_keys(o, path, schema::keys(schema::kCpuidOverride));
      CpuidOverride ov;
      auto word = [&](const char* key, bool required) -> uint32_t {
        const Json* v = required ? &r_.required(o, path, key) : ProfileFields::optional(o, key);
        if (v == nullptr) return 0;
        return static_cast<uint32_t>(
            r_.unsigned_value(*v, ProfileFields::child(path, key), 0, 0xFFFFFFFF, true));
      };
      ov.leaf = word("leaf", true);
      ov.subleaf = word("subleaf", false);
      ov.set = word("set", false);
      ov.clear = word("clear", false);
      const std::string reg_path = ProfileFields::child(path, "register");
      const std::string reg = r_.string(r_.required(o, path, "register"), reg_path);
      if (reg == "eax")
        ov.reg = CpuidRegister::kEax;
      else if (reg == "ebx")
        ov.reg = CpuidRegister::kEbx;
      else if (reg == "ecx")
        ov.reg = CpuidRegister::kEcx;
      else if (reg == "edx")
        ov.reg = CpuidRegister::kEdx;
      else
        r_.fail(reg_path, reg_path + " must be one of eax, ebx, ecx, edx, got " + in_quotes(reg));
      if (ov.set & ov.clear)
        r_.fail(path,
                path + " sets and clears the same bits " + ProfileFields::hex(ov.set & ov.clear));
      if (const Json* v = ProfileFields::optional(o, "note"))
        ov.note = r_.string(*v, ProfileFields::child(path, "note"));
      p.cpuid_overrides.push_back(ov);
    }
  }

  void parse_lwp(const Json& root, CpuProfile& p) {
    const Json* v = ProfileFields::nullable(root, "lwp");
    if (v == nullptr) return;  // no LWP: Capabilities{} has available == false
    const Json& o = *v;
    r_.expect_object(o, "lwp");
    r_.check_keys(o, "lwp", schema::keys(schema::kLwp));
    if (const Json* a = ProfileFields::optional(o, "available");
        a && !r_.boolean(*a, "lwp.available")) {
      // "available": false describes a processor without LWP; any other field is a mistake.
      const std::optional<std::string> extra =
          r_.first_key_in_text(o, "lwp", [](const std::string& k) { return k != "available"; });
      if (extra)
        r_.fail("lwp." + *extra, "lwp." + *extra + " has no meaning when lwp.available is false");
      return;
    }
    lwp::Capabilities& c = p.lwp;
    c.available = true;
    // The enable policy and its vector depend on the whole of the capabilities: read after.
    schema::read(r_, o, "lwp", schema::kLwp, c, [&](std::string_view key) {
      if (key == "events") parse_lwp_events(r_.required(o, "lwp", "events"), c);
    });
    if (const pmu::Status valid = lwp::validate(c); !valid.ok())
      r_.fail("lwp", "lwp: " + valid.reason());
    parse_lwp_policy(o, p);
  }

  void parse_lwp_events(const Json& events, lwp::Capabilities& c) {
    r_.expect_array(events, "lwp.events");
    for (size_t i = 0; i < events.size(); ++i) {
      const std::string path = ProfileFields::element("lwp.events", i);
      const std::string name = r_.string(events[i], path);
      bool* slot = nullptr;
      for (const LwpEventName& e : kLwpEvents)
        if (name == e.name) slot = &(c.*e.offered);
      if (slot == nullptr)
        r_.fail(path,
                path + " must be one of IRE, BRE, DME (proposal Table 2), got " + in_quotes(name));
      if (*slot) r_.fail(path, path + ": event " + name + " is listed twice");
      *slot = true;
    }
  }

  void parse_lwp_policy(const Json& o, CpuProfile& p) {
    const lwp::Capabilities& c = p.lwp;
    const uint64_t allowed = c.msr0_allowed();
    uint64_t policy = allowed;  // default: the kernel enables everything the processor offers
    if (const Json* list = ProfileFields::optional(o, "enable_policy")) {
      r_.expect_array(*list, "lwp.enable_policy");
      policy = 0;
      for (size_t i = 0; i < list->size(); ++i) {
        const std::string path = ProfileFields::element("lwp.enable_policy", i);
        const std::string name = r_.string((*list)[i], path);
        const LwpPolicyName* bit = nullptr;
        for (const LwpPolicyName& b : kLwpPolicyBits)
          if (name == b.name) bit = &b;
        if (bit == nullptr)
          r_.fail(path, path + " must be one of EN, IRE, BRE, DME, INT, got " + in_quotes(name));
        // What offers each bit: LWP itself (EN), the interrupt (INT), else the event.
        const std::string needs = bit->bit == lwp::msr0::kEnabled ? "lwp.available"
                                  : bit->bit == lwp::msr0::kInterrupt
                                      ? "lwp.interrupt: true"
                                      : "\"" + name + "\" in lwp.events";
        if (!(allowed & bit->bit))
          r_.fail(path, path + ": the policy enables " + name +
                            " but the profile does not offer "
                            "it (needs " +
                            needs + "); LWPMSR0 would #GP");
        if (policy & bit->bit) r_.fail(path, path + ": " + name + " is listed twice");
        policy |= bit->bit;
      }
      if (policy != 0 && !(policy & lwp::msr0::kEnabled))
        r_.fail("lwp.enable_policy",
                "lwp.enable_policy enables features without EN, which "
                "leaves LWP off; add \"EN\" or make the list empty");
    }
    const Json* vec = ProfileFields::optional(o, "interrupt_vector");
    if (vec != nullptr && !c.interrupt)
      r_.fail("lwp.interrupt_vector", "lwp.interrupt_vector needs lwp.interrupt: true");
    uint8_t vector = kDefaultLwpVector;
    if (vec != nullptr)  // vectors 0..31 are exceptions, not interrupts
      vector =
          static_cast<uint8_t>(r_.unsigned_value(*vec, "lwp.interrupt_vector", 0x20, 0xFF, true));
    if (policy & lwp::msr0::kInterrupt) {
      p.lwp_interrupt_vector = vector;
      policy |= uint64_t{vector} << lwp::msr0::kVectorShift;
    }
    p.lwp_enable_policy = policy;
  }

  void parse_netburst(const Json& root, CpuProfile& p) {
    const Json* v = ProfileFields::nullable(root, "netburst");
    if (v == nullptr) return;
    r_.expect_object(*v, "netburst");
    r_.check_keys(*v, "netburst", schema::keys(schema::kNetburst));
    NetburstParams n;
    schema::read(r_, *v, "netburst", schema::kNetburst, n);
    // Linux's p4 driver (and ours) trust the counters only when MISC_ENABLE says they exist.
    if (!p.misc_enable || !(*p.misc_enable & kMiscEnablePerfmonAvailable))
      r_.fail("netburst",
              "netburst needs misc_enable bit 7 (performance monitoring available) set");
    p.netburst = n;
  }

  void parse_architectural_pmu(const Json& root, CpuProfile& p) {
    const Json* v = ProfileFields::nullable(root, "architectural_pmu");
    if (v == nullptr) return;
    const char* const path = "architectural_pmu";
    r_.expect_object(*v, path);
    r_.check_keys(*v, path, schema::keys(schema::kArchitecturalPmu));
    ArchitecturalPmu a;
    schema::read(r_, *v, path, schema::kArchitecturalPmu, a);
    if (a.version < 2 && a.fixed_counters != 0)
      r_.fail(path, "architectural_pmu version 1 has no fixed counters (fixed_counters 0)");
    // Leaf 0xA is Intel's; a NetBurst PMU predates it (Linux picks one driver by this leaf).
    if (p.vendor != "GenuineIntel")
      r_.fail(path, "architectural_pmu (CPUID 0xA) is Intel's: vendor must be GenuineIntel");
    if (p.max_basic_leaf < 0xA)
      r_.fail(path, "architectural_pmu needs max_basic_leaf 0xa or more (CPUID 0xA holds it)");
    if (p.netburst) r_.fail(path, "a profile has a NetBurst PMU or an architectural one, not both");
    if (a.modelled_by_pmuvm)
      if (const pmu::Status valid = pmu::arch_perfmon::validate(arch_pmu_config(a, p)); !valid.ok())
        r_.fail(path, "pmuvm's architectural PMU model: " + valid.reason());
    // Linux finds PEBS through CPUID's DS (DTES64: the 64-bit DS area) and LBR by model, and
    // reads both formats from PERF_CAPABILITIES (PDCM).
    check_model_part(a.pebs, "pebs", "PEBS", {"ds", "dtes64", "pdcm"}, a, p);
    check_model_part(a.lbr, "lbr", "LBR", {"pdcm"}, a, p);
    check_pebs_misc_enable(a, p);
    p.architectural_pmu = a;
  }

  // A part of pmuvm's own model that `key` turns on needs the model (KVM's vPMU has no such part
  // here) and the CPUID features through which the guest finds it.
  void check_model_part(bool on, const char* key, const char* part,
                        std::initializer_list<const char*> features, const ArchitecturalPmu& a,
                        const CpuProfile& p) {
    if (!on) return;
    const std::string path = std::string("architectural_pmu.") + key;
    if (!a.modelled_by_pmuvm)
      r_.fail(path, path + " needs modelled_by_pmuvm (KVM's vPMU offers no " + part + ")");
    for (const char* needed : features)
      if (!p.has_feature(needed))
        r_.fail(path, path + " needs feature \"" + needed + "\" (CPUID 1)");
  }

  // Linux believes in PEBS when MISC_ENABLE bit 12 (PEBS unavailable) is clear, and takes BTS
  // unless bit 11 is set.
  void check_pebs_misc_enable(const ArchitecturalPmu& a, const CpuProfile& p) {
    if (!a.modelled_by_pmuvm) return;
    const bool misc_says_pebs = p.misc_enable && !(*p.misc_enable & kMiscEnablePebsUnavailable);
    if (misc_says_pebs != a.pebs)
      r_.fail("misc_enable",
              a.pebs ? "architectural_pmu.pebs needs misc_enable with bit 12 (PEBS unavailable) "
                       "clear"
                     : "misc_enable bit 12 (PEBS unavailable) is clear, but "
                       "architectural_pmu.pebs is not set");
    if (p.misc_enable && !(*p.misc_enable & kMiscEnableBtsUnavailable))
      r_.fail("misc_enable", "misc_enable bit 11 (BTS unavailable) must be set: pmuvm has no BTS");
  }

  void parse_cache(const Json& o, CacheGeometry& cache) {
    r_.expect_object(o, "cache");
    r_.check_keys(o, "cache", schema::keys(schema::kCache));
    // The levels' geometry depends on the line size, which comes first in the table.
    schema::read(r_, o, "cache", schema::kCache, cache, [&](std::string_view key) {
      if (key == "l1d") {
        if (!power_of_two(cache.line_size))
          r_.fail("cache.line_size",
                  "cache.line_size must be a power of two, got " + std::to_string(cache.line_size));
        cache.l1d = parse_level(r_.required(o, "cache", "l1d"), "cache.l1d", cache.line_size);
      } else if (key == "l2") {
        cache.l2 = parse_level(r_.required(o, "cache", "l2"), "cache.l2", cache.line_size);
      } else if (key == "l3") {
        if (const Json* v = ProfileFields::nullable(o, "l3"))
          cache.l3 = parse_level(*v, "cache.l3", cache.line_size);
      }
    });
    // The model keeps a tag and an age (16 bytes) per line of every level, per vCPU, from its
    // first fill: no more than 2^22 lines (64 MiB per vCPU; 256 MiB of cache in 64-byte lines,
    // more than any core's share), or a profile - one in a snapshot too - could make every vCPU
    // allocate gigabytes.
    constexpr uint64_t kMaxModelLines = uint64_t{1} << 22;
    const uint64_t kib =
        uint64_t{cache.l1d.size_kib} + cache.l2.size_kib + (cache.l3 ? cache.l3->size_kib : 0);
    if (const uint64_t lines = kib * 1024 / cache.line_size; lines > kMaxModelLines)
      r_.fail("cache", "cache: its levels hold " + std::to_string(lines) + " lines of " +
                           std::to_string(cache.line_size) +
                           " bytes; the cache model keeps at most " +
                           std::to_string(kMaxModelLines) + " (64 MiB per vCPU)");
    // Each level further out must be slower, or the cache model's costs make no sense.
    auto slower = [&](const char* inner, uint32_t inner_lat, const std::string& outer_path,
                      uint32_t outer_lat) {
      if (outer_lat <= inner_lat)
        r_.fail(outer_path, outer_path + " (" + std::to_string(outer_lat) + ") must exceed " +
                                inner + " (" + std::to_string(inner_lat) + ")");
    };
    slower("cache.l1d.latency_cycles", cache.l1d.latency_cycles, "cache.l2.latency_cycles",
           cache.l2.latency_cycles);
    uint32_t last = cache.l2.latency_cycles;
    const char* last_name = "cache.l2.latency_cycles";
    if (cache.l3) {
      slower(last_name, last, "cache.l3.latency_cycles", cache.l3->latency_cycles);
      last = cache.l3->latency_cycles;
      last_name = "cache.l3.latency_cycles";
    }
    slower(last_name, last, "cache.dram_latency_cycles", cache.dram_latency_cycles);
  }

  CacheLevel parse_level(const Json& o, const std::string& path, uint32_t line_size) {
    r_.expect_object(o, path);
    r_.check_keys(o, path, schema::keys(schema::kCacheLevel));
    CacheLevel level;
    schema::read(r_, o, path, schema::kCacheLevel, level);
    // A set-associative cache indexes sets with address bits: their number is a power of two.
    const uint64_t bytes = uint64_t{level.size_kib} * 1024;
    const uint64_t way_bytes = uint64_t{line_size} * level.ways;
    if (bytes % way_bytes != 0 || !power_of_two(bytes / way_bytes))
      r_.fail(path, path + ": " + std::to_string(level.size_kib) + " KiB in " +
                        std::to_string(level.ways) + " ways of " + std::to_string(line_size) +
                        "-byte lines is not a power-of-two number of sets");
    return level;
  }

  // ---- computed baselines ---------------------------------------------------------------------

  CpuProfile parse_baseline(const Json& root, CpuProfile& p) {
    // Everything but the name and description is computed from the members, so other keys
    // could only contradict the computation.
    const std::optional<std::string> extra =
        r_.first_key_in_text(root, "", [](const std::string& k) {
          return k != "name" && k != "description" && k != "baseline_of";
        });
    if (extra) {
      r_.check_keys(root, "", schema::keys(schema::kProfile));
      r_.fail(*extra, *extra +
                          " is not allowed next to baseline_of (a baseline profile takes "
                          "everything but name and description from its members)");
    }
    p.description = r_.string(r_.required(root, "", "description"), "description");
    const Json& list = r_.required(root, "", "baseline_of");
    r_.expect_array(list, "baseline_of");
    if (list.empty()) r_.fail("baseline_of", "baseline_of must name at least one profile");
    std::vector<CpuProfile> members;
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string path = ProfileFields::element("baseline_of", i);
      const std::string ref = r_.string(list[i], path);
      if (ref.empty()) r_.fail(path, path + " must not be empty");
      members.push_back(resolve_member(ref, path));
      p.baseline_of.push_back(ref);
    }
    if (const Status composed = compose_baseline(members, p); !composed.ok())
      r_.fail("baseline_of", "baseline_of: " + composed.error().message);
    return p;
  }

  CpuProfile resolve_member(const std::string& ref, const std::string& path) {
    const bool is_path = ref.find('/') != std::string::npos ||
                         (ref.size() > 5 && ref.compare(ref.size() - 5, 5, ".json") == 0);
    if (is_path && !ctx_.files_allowed)
      r_.fail(path, path + ": a profile inside a snapshot or migration stream names no files ('" +
                        ref + "')");
    std::filesystem::path file(ref);
    if (is_path && file.is_relative()) file = std::filesystem::path(source_).parent_path() / file;
    const std::string key = is_path ? file_key(file.string()) : "name:" + ref;
    check_cycle(key, ref, path);
    // A member parsed without a cycle has none below it whatever chain names it next (a cycle
    // through it would have been found when it was parsed), so its result stands for every path.
    if (auto it = ctx_.resolved.find(key); it != ctx_.resolved.end()) return it->second;
    Result<CpuProfile> result = [&]() -> Result<CpuProfile> {
      if (is_path) {
        const Result<std::string> text = read_text_file(file.string());
        if (!text.ok())
          r_.fail(path, path + ": cannot read '" + file.string() + "': " + text.error().message);
        return parse_in_context(text.value(), file.string(), {key}, ctx_);
      }
      const std::optional<NamedProfileText> found = ctx_.lookup ? ctx_.lookup(ref) : std::nullopt;
      if (!found)
        r_.fail(path, path + ": unknown profile " + in_quotes(ref) +
                          " (not a shipped profile; a file "
                          "must be given as a path ending in .json)");
      return parse_in_context(found->text, found->source_name, {key}, ctx_);
    }();
    if (!result.ok()) throw ProfileFields::Failure{result.error().message};
    ctx_.resolved.emplace(key, *result);
    return std::move(*result);
  }

  void check_cycle(const std::string& key, const std::string& ref, const std::string& path) {
    for (size_t i = 0; i < ctx_.frames.size(); ++i) {
      const auto& keys = ctx_.frames[i].keys;
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) continue;
      std::string chain;
      for (size_t j = i; j < ctx_.frames.size(); ++j) chain += ctx_.frames[j].display + " -> ";
      r_.fail(path, path + ": baseline_of cycle " + chain + ref);
    }
  }

  ProfileFields r_;
  std::string source_;
  ParseContext& ctx_;
  std::vector<std::string> identity_keys_;
};

}  // namespace

std::string file_key(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p =
      std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec);
  if (ec) p = std::filesystem::path(path).lexically_normal();
  return "file:" + p.string();
}

Result<std::string> read_text_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return Error::usage("is a directory");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Error::usage(std::strerror(errno));
  }
  // One byte past the limit says the file is too big, without reading all of /dev/zero.
  std::string text(kProfileJsonLimits.max_bytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) {
    return Error::usage("read error");
  }
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kProfileJsonLimits.max_bytes) {
    return Error::usage("larger than " + std::to_string(kProfileJsonLimits.max_bytes) + " bytes");
  }
  return text;
}

Result<CpuProfile> parse_in_context(std::string_view text, std::string_view source_name,
                                    std::vector<std::string> identity_keys, ParseContext& context) {
  const Result<nlohmann::json> document = read_json_text(text, kProfileJsonLimits);
  if (!document.ok()) return document.error().prefixed(std::string(source_name) + ":");
  try {
    ProfileParser parser(source_name, text, context, std::move(identity_keys));
    return parser.parse(document.value());
  } catch (const ProfileFields::Failure& f) {
    return Error::usage(f.message);
  } catch (const std::exception& e) {  // nlohmann type errors we did not foresee, bad_alloc
    return Error::usage(std::string(source_name) + ": " + e.what());
  }
}

}  // namespace vmm::detail
