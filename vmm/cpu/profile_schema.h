// The CPU profile's fields, declared once (vmm/profiles/README.md documents them): for every
// section its keys in file order, and for each number or flag its range, whether it is required,
// how it is written, what a migration baseline takes from its members and what a destination must
// offer. The parser, the writer, the baseline and the migration check all read these tables
// (profile_field_ops.h); a key whose value is a list or needs rules across fields (features, the
// LWP events and policy, cache levels...) is a `kCustom` row, handled by the section's own code
// at the place the table gives it.
#pragma once

#include <cstdint>
#include <string_view>
#include <variant>

#include "pmu/lwp/architecture.h"
#include "pmu/lwp/capabilities.h"
#include "vmm/cpu/cpu_profile.h"

namespace vmm::profile_schema {

// How a number is written and quoted back: decimal, "0x…", or written in decimal but with its
// range and refusals in hex (the stepping, displayed "stepping 2" but bounded "0x0..0xf").
enum class Style : uint8_t { kDecimal, kHex, kHexInErrors };
// What a baseline of several profiles takes: the first member's value, or the smallest (for a
// flag: offered only if every member offers it).
enum class Baseline : uint8_t { kFirst, kMinimum };
// What a migration destination must offer of what the guest saw (DESIGN §4.10).
enum class Destination : uint8_t { kAnything, kAtLeast, kSame };

struct Custom {};  // the section's code reads, writes and compares this key itself

template <class S>
struct Field {
  using Member = std::variant<Custom, uint32_t S::*, uint8_t S::*, bool S::*>;
  std::string_view key;
  Member member = Custom{};
  uint64_t lo = 0, hi = 0;  // numbers: the accepted range
  bool required = false;
  Style style = Style::kDecimal;
  Baseline baseline = Baseline::kFirst;
  Destination destination = Destination::kAnything;
  bool written_when_default = true;  // false: the writer leaves the key out at S{}'s value
};

namespace lwp = pmu::lwp;

// The profile itself. Only the numbers of the processor's identity are generic; the rest are
// sections or lists with their own code.
inline constexpr Field<CpuProfile> kProfile[] = {
    {.key = "name"},
    {.key = "description"},
    {.key = "vendor"},  // CPUID 0: a destination must have the same (migration_check.cc)
    // Displayed family = base + extended; base saturates at 0xF, extended is 8 bits.
    {.key = "family",
     .member = &CpuProfile::family,
     .lo = 1,
     .hi = 0xF + 0xFF,
     .required = true,
     .style = Style::kHex,
     .destination = Destination::kSame},
    {.key = "model",
     .member = &CpuProfile::model,
     .lo = 0,
     .hi = 0xFF,
     .required = true,
     .style = Style::kHex,
     .destination = Destination::kSame},
    {.key = "stepping",
     .member = &CpuProfile::stepping,
     .lo = 0,
     .hi = 0xF,
     .style = Style::kHexInErrors},
    {.key = "brand"},
    {.key = "max_basic_leaf"},  // defaults computed from what the profile defines
    {.key = "max_extended_leaf"},
    {.key = "features"},
    {.key = "address_sizes"},
    {.key = "cpuid_overrides"},
    {.key = "misc_enable"},
    {.key = "lwp"},
    {.key = "netburst"},
    {.key = "architectural_pmu"},
    {.key = "cache"},
    {.key = "baseline_of"},    // read, never written: a written baseline is literal ...
    {.key = "computed_from"},  // ... and names its members here
};

// CPUID 0x80000008 EAX. KVM_SET_CPUID2 takes linear widths of 48 and 57 only (checked apart).
inline constexpr Field<AddressSizes> kAddressSizes[] = {
    {.key = "physical",
     .member = &AddressSizes::physical,
     .lo = 32,
     .hi = 52,
     .required = true,
     .baseline = Baseline::kMinimum,
     .destination = Destination::kAtLeast},
    {.key = "linear",
     .member = &AddressSizes::linear,
     .lo = 32,
     .hi = 57,
     .required = true,
     .baseline = Baseline::kMinimum,
     .destination = Destination::kAtLeast},
};

// `cpuid_overrides[i]`: all custom (the register is a name, set and clear exclude each other).
inline constexpr Field<CpuidOverride> kCpuidOverride[] = {
    {.key = "leaf"}, {.key = "subleaf"}, {.key = "register"},
    {.key = "set"},  {.key = "clear"},   {.key = "note"},
};

// `lwp` (CPUID 0x8000001C). Its baseline is pmu::lwp::baseline(), the proposal's rule, so the
// rows' baseline fields are not read for it.
inline constexpr Field<lwp::Capabilities> kLwp[] = {
    {.key = "available"},
    {.key = "version",
     .member = &lwp::Capabilities::version,
     .lo = lwp::kVersion,
     .hi = lwp::kVersion,
     .destination = Destination::kSame},
    {.key = "interrupt",
     .member = &lwp::Capabilities::interrupt,
     .destination = Destination::kAtLeast},
    {.key = "events"},  // names of the offered events, and each one must be at the destination
    {.key = "max_events",
     .member = &lwp::Capabilities::max_events,
     .lo = 1,
     .hi = lwp::kMaxEventSlots,
     .required = true,
     .destination = Destination::kAtLeast},
    {.key = "cache_max_bits",
     .member = &lwp::Capabilities::cache_max_bits,
     .lo = 10,
     .hi = 31,
     .destination = Destination::kAtLeast},
    {.key = "data_address",
     .member = &lwp::Capabilities::data_address,
     .destination = Destination::kAtLeast},
    {.key = "cache_level_filter",
     .member = &lwp::Capabilities::cache_level_filter,
     .destination = Destination::kAtLeast},
    {.key = "cache_latency_filter",
     .member = &lwp::Capabilities::cache_latency_filter,
     .destination = Destination::kAtLeast},
    {.key = "enable_policy"},  // the CpuProfile's, not the processor's
    // Whether branch records carry the predicted bit: a guest that saw one kind must keep it.
    {.key = "branch_prediction",
     .member = &lwp::Capabilities::branch_prediction,
     .destination = Destination::kSame,
     .written_when_default = false},
    {.key = "interrupt_vector"},
};

inline constexpr Field<NetburstParams> kNetburst[] = {
    {.key = "counters",
     .member = &NetburstParams::counters,
     .lo = 1,
     .hi = 18,
     .baseline = Baseline::kMinimum,
     .destination = Destination::kAtLeast},
    {.key = "counter_bits",
     .member = &NetburstParams::counter_bits,
     .lo = 32,
     .hi = 40,
     .baseline = Baseline::kMinimum,
     .destination = Destination::kAtLeast},
    // The ESCR/CCCR T1 bits mean something with two threads only: a guest keeps what it saw.
    {.key = "threads_per_core",
     .member = &NetburstParams::threads_per_core,
     .lo = 1,
     .hi = 2,
     .baseline = Baseline::kMinimum,
     .destination = Destination::kSame},
};

inline constexpr Field<ArchitecturalPmu> kArchitecturalPmu[] = {
    {.key = "version",
     .member = &ArchitecturalPmu::version,
     .lo = 1,
     .hi = 5,
     .baseline = Baseline::kMinimum,
     .destination = Destination::kAtLeast},
    {.key = "counters",
     .member = &ArchitecturalPmu::counters,
     .lo = 1,
     .hi = 32,
     .baseline = Baseline::kMinimum,
     .destination = Destination::kAtLeast},
    {.key = "counter_bits",
     .member = &ArchitecturalPmu::counter_bits,
     .lo = 32,
     .hi = 64,
     .baseline = Baseline::kMinimum,
     .destination = Destination::kAtLeast},
    {.key = "fixed_counters",
     .member = &ArchitecturalPmu::fixed_counters,
     .lo = 0,
     .hi = 16,
     .baseline = Baseline::kMinimum,
     .destination = Destination::kAtLeast},
    {.key = "fixed_counter_bits",
     .member = &ArchitecturalPmu::fixed_counter_bits,
     .lo = 32,
     .hi = 64,
     .baseline = Baseline::kMinimum,
     .destination = Destination::kAtLeast},
};

// The cache model's geometry: the guest never sees it through CPUID, so migration ignores it.
inline constexpr Field<CacheGeometry> kCache[] = {
    {.key = "line_size", .member = &CacheGeometry::line_size, .lo = 16, .hi = 512},
    {.key = "l1d"},
    {.key = "l2"},
    {.key = "l3"},
    {.key = "dram_latency_cycles",
     .member = &CacheGeometry::dram_latency_cycles,
     .lo = 1,
     .hi = 100000,
     .required = true},
};

inline constexpr Field<CacheLevel> kCacheLevel[] = {
    {.key = "size_kib", .member = &CacheLevel::size_kib, .lo = 1, .hi = 1u << 20, .required = true},
    {.key = "ways", .member = &CacheLevel::ways, .lo = 1, .hi = 1024, .required = true},
    {.key = "latency_cycles",
     .member = &CacheLevel::latency_cycles,
     .lo = 1,
     .hi = 100000,
     .required = true},
};

}  // namespace vmm::profile_schema
