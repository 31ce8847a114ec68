// CPU profiles: what processor the guest sees (vendor, family/model, brand, CPUID overrides,
// MISC_ENABLE) and which PMU models it gets with which parameters (virtual LWP, NetBurst), plus
// the cache geometry the cache model uses (DESIGN.md §4.5). Profiles are JSON; the schema is
// documented field by field in vmm/profiles/README.md. The shipped profiles are compiled into the
// binary, so `--cpu NAME` needs no files at run time; `--cpu FILE` loads a user's profile.
//
// Nothing here includes a KVM header: the KVM layer turns a CpuProfile into KVM_SET_CPUID2
// entries with cpuid_table.h and into MSR values itself.
//
// Errors are returned, never thrown: one line "FILE:LINE:COLUMN: message", where LINE:COLUMN is
// the JSON syntax error, or the key (array element) the problem is about.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pmu/lwp/capabilities.h"
#include "vmm/result.h"
#include "vmm/json/json_text.h"

namespace vmm {

enum class CpuidRegister : uint8_t { kEax, kEbx, kEcx, kEdx };

// One `cpuid_overrides` entry: register = (register & ~clear) | set, applied after everything
// else the table builder computes.
struct CpuidOverride {
  uint32_t leaf = 0;
  uint32_t subleaf = 0;
  CpuidRegister reg = CpuidRegister::kEax;
  uint32_t set = 0;
  uint32_t clear = 0;
  std::string note;  // why the override exists (documentation only)
  bool operator==(const CpuidOverride&) const = default;
};

struct CacheLevel {
  uint32_t size_kib = 0;
  uint32_t ways = 0;
  uint32_t latency_cycles = 0;  // load-to-use latency of a hit in this level
  bool operator==(const CacheLevel&) const = default;
};

struct CacheGeometry {
  uint32_t line_size = 64;  // bytes, all levels
  CacheLevel l1d;
  CacheLevel l2;
  std::optional<CacheLevel> l3;  // absent on processors without an L3
  uint32_t dram_latency_cycles = 0;
  bool operator==(const CacheGeometry&) const = default;
};

// Parameters of the virtual NetBurst PMU (pmu/netburst).
struct NetburstParams {
  uint32_t counters = 18;         // counters (and CCCRs) 0..counters-1 exist
  uint32_t counter_bits = 40;     // counter width
  uint32_t threads_per_core = 1;  // 1: single-threaded, the ESCR/CCCR T1 bits are inert
  bool operator==(const NetburstParams&) const = default;
};

// CPUID 0xA: Intel's architectural performance monitoring (SDM vol. 3B, 20.2), the guest's own
// PMU. Either KVM's vPMU provides it where the host has one (DESIGN §4.11), and the leaf is
// filtered by what KVM offers like any feature (on a host without a PMU the guest gets none), or
// pmuvm's own model does (`modelled_by_pmuvm`, DESIGN §4.13: pmu/arch_perfmon), on any host,
// with the leaf as the profile says.
struct ArchitecturalPmu {
  uint32_t version = 2;              // EAX[7:0]
  uint32_t counters = 4;             // EAX[15:8]: general-purpose counters per logical processor
  uint32_t counter_bits = 48;        // EAX[23:16]
  uint32_t fixed_counters = 3;       // EDX[4:0] (version 2 on)
  uint32_t fixed_counter_bits = 48;  // EDX[12:5]
  bool modelled_by_pmuvm = false;    // pmu/arch_perfmon serves the MSRs; KVM's vPMU is off
  bool pebs = false;  // PEBS format 3 (DS area, IA32_PEBS_ENABLE): pmuvm's model only
  bool lbr = false;   // 32 last-branch records (LBR format 5): pmuvm's model only
  bool operator==(const ArchitecturalPmu&) const = default;
};

// CPUID 0x80000008 EAX: physical (7:0) and linear (15:8) address bits.
struct AddressSizes {
  uint32_t physical = 0;
  uint32_t linear = 0;
  bool operator==(const AddressSizes&) const = default;
};

struct CpuProfile {
  std::string name;
  std::string description;
  std::string source;  // where it was read from: "amd-lwp.json" (shipped) or the file's path

  std::string vendor;   // 12 characters, CPUID 0 EBX/EDX/ECX
  uint32_t family = 0;  // the displayed family: base + extended (e.g. 0x15)
  uint32_t model = 0;   // the displayed model: (extended << 4) | base
  uint32_t stepping = 0;
  std::string brand;  // CPUID 0x80000002..4, at most 47 characters

  // The complete CPUID definition (vmm/cpu/cpuid_table.h builds the guest's table from these
  // alone, never from the host's values): highest basic and extended leaf, the named feature
  // bits (vmm/cpu/cpuid_features.h) in file order, and CPUID 0x80000008's address sizes.
  uint32_t max_basic_leaf = 1;
  uint32_t max_extended_leaf = 0x80000004;
  std::vector<std::string> features;
  std::optional<AddressSizes> address_sizes;  // nullopt: leaf 0x80000008 EAX reads 0
  bool has_feature(std::string_view name) const {
    return std::find(features.begin(), features.end(), name) != features.end();
  }

  std::vector<CpuidOverride> cpuid_overrides;
  // IA32_MISC_ENABLE (MSR 0x1A0) value the VMM sets, or nullopt to leave KVM's default.
  std::optional<uint64_t> misc_enable;

  pmu::lwp::Capabilities lwp;  // available == false: no LWP (CPUID 0x80000001 ECX[15] clear)
  // The LWPMSR0 value the bundled guest kernel writes, and hence CPUID 0x8000001C EAX: EN, IRE,
  // BRE, DME, INT bits plus, when INT is set, the vector in bits 47:40 (DESIGN §3: EAX cannot
  // follow later writes, so it is fixed from this policy). 0 when the profile has no LWP.
  uint64_t lwp_enable_policy = 0;
  uint8_t lwp_interrupt_vector = 0;  // LWPMSR0[47:40]; 0 when the policy has no INT

  std::optional<NetburstParams> netburst;             // nullopt: no NetBurst PMU
  std::optional<ArchitecturalPmu> architectural_pmu;  // nullopt: CPUID 0xA reads 0
  CacheGeometry cache;

  // Names (or paths) of the members when this profile is a computed migration baseline
  // (`baseline_of`, or `computed_from` in a baseline written out by profile_writer.h).
  std::vector<std::string> baseline_of;

  bool operator==(const CpuProfile&) const = default;
};

// A profile or the one-line reason there is none.
// The functions below return the profile or a usage error: "FILE:LINE:COLUMN: message" (or
// "FILE: message" for I/O problems).

// Resolves a `baseline_of` member that is a name (not a path) to its JSON text. The default,
// builtin_lookup(), knows the shipped profiles; tests pass their own.
struct NamedProfileText {
  std::string source_name;  // used in error messages, e.g. "amd-lwp.json"
  std::string text;
};
using ProfileLookup = std::function<std::optional<NamedProfileText>(std::string_view name)>;
ProfileLookup builtin_lookup();

// Parses one profile. `source_name` names the text in messages and is the directory that
// relative `baseline_of` paths are resolved against.
Result<CpuProfile> parse_profile(std::string_view text, std::string_view source_name,
                                 const ProfileLookup& lookup = builtin_lookup());

// A profile is a few kilobytes nested a few levels; a bigger or deeper one (in a file, a snapshot
// or a migration stream) is crafted and refused as it is read.
inline constexpr JsonLimits kProfileJsonLimits{.max_bytes = 1 << 20, .max_depth = 64};

// Parses a profile that came with a snapshot or a migration stream: as parse_profile, but its
// baseline_of may name shipped profiles only, never a file of this machine.
Result<CpuProfile> parse_embedded_profile(std::string_view text, std::string_view source_name);

// Reads and parses a profile file.
Result<CpuProfile> load_profile_file(const std::string& path);

// A shipped profile by name ("amd-lwp", ...).
Result<CpuProfile> builtin_profile(std::string_view name);
// The shipped profiles' names, sorted.
std::vector<std::string> builtin_profile_names();

// `--cpu NAME|FILE`: the shipped profile of that name if there is one, else the file at that path.
// An argument containing '/' or ending in ".json" is always a path.
Result<CpuProfile> resolve_cpu_option(std::string_view name_or_path);

}  // namespace vmm
