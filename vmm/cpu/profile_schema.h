// The CPU profile's fields, declared once (vmm/profiles/README.md documents them): for every
// section its keys in file order, and for each number or flag its range, whether it is required,
// how it is written, what a migration baseline takes from its members and what a destination must
// offer. The parser, the writer, the baseline and the migration check all read these tables
// (profile_field_ops.h); a key whose value is a list or needs rules across fields (features, the
// LWP events and policy, cache levels...) is a custom row (a key alone), handled by the section's
// own code at the place the table gives it.
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

// Short names for the tables' columns.
inline constexpr bool kRequired = true, kOptional = false;
inline constexpr Style kDec = Style::kDecimal, kHex = Style::kHex, kHexErrors = Style::kHexInErrors;
inline constexpr Baseline kFirst = Baseline::kFirst, kMin = Baseline::kMinimum;
inline constexpr Destination kAny = Destination::kAnything, kAtLeast = Destination::kAtLeast,
                             kSame = Destination::kSame;

// clang-format off
// Each table: {key, member, lo, hi, required, style, baseline, destination[, written when
// default]}; a row with only a key is custom.

// The profile itself. Only the numbers of the processor's identity are generic; the rest are
// sections or lists with their own code. The vendor, like family and model, must be the same at
// a migration destination (migration_check.cc).
inline constexpr Field<CpuProfile> kProfile[] = {
    {"name"},
    {"description"},
    {"vendor"},
    // Displayed family = base + extended; base saturates at 0xF, extended is 8 bits.
    {"family",   &CpuProfile::family,   1, 0xF + 0xFF, kRequired, kHex,       kFirst, kSame},
    {"model",    &CpuProfile::model,    0, 0xFF,       kRequired, kHex,       kFirst, kSame},
    {"stepping", &CpuProfile::stepping, 0, 0xF,        kOptional, kHexErrors, kFirst, kAny},
    {"brand"},
    {"max_basic_leaf"},  // defaults computed from what the profile defines
    {"max_extended_leaf"},
    {"features"},
    {"address_sizes"},
    {"cpuid_overrides"},
    {"misc_enable"},
    {"lwp"},
    {"netburst"},
    {"architectural_pmu"},
    {"cache"},
    {"baseline_of"},    // read, never written: a written baseline is literal ...
    {"computed_from"},  // ... and names its members here
};

// CPUID 0x80000008 EAX. KVM_SET_CPUID2 takes linear widths of 48 and 57 only (checked apart).
inline constexpr Field<AddressSizes> kAddressSizes[] = {
    {"physical", &AddressSizes::physical, 32, 52, kRequired, kDec, kMin, kAtLeast},
    {"linear",   &AddressSizes::linear,   32, 57, kRequired, kDec, kMin, kAtLeast},
};

// `cpuid_overrides[i]`: all custom (the register is a name, set and clear exclude each other).
inline constexpr Field<CpuidOverride> kCpuidOverride[] = {
    {"leaf"}, {"subleaf"}, {"register"}, {"set"}, {"clear"}, {"note"},
};

// `lwp` (CPUID 0x8000001C). Its baseline is pmu::lwp::baseline(), the proposal's rule, so the
// rows' baseline column is not read for it. The events are the processor's, the enable policy
// and its vector the CpuProfile's. Whether branch records carry the predicted bit: a guest that
// saw one kind must keep it.
inline constexpr Field<lwp::Capabilities> kLwp[] = {
    {"available"},
    {"version",              &lwp::Capabilities::version,        lwp::kVersion, lwp::kVersion, kOptional, kDec, kFirst, kSame},
    {"interrupt",            &lwp::Capabilities::interrupt,      0, 0, kOptional, kDec, kFirst, kAtLeast},
    {"events"},
    {"max_events",           &lwp::Capabilities::max_events,     1, lwp::kMaxEventSlots, kRequired, kDec, kFirst, kAtLeast},
    {"cache_max_bits",       &lwp::Capabilities::cache_max_bits, 10, 31, kOptional, kDec, kFirst, kAtLeast},
    {"data_address",         &lwp::Capabilities::data_address,         0, 0, kOptional, kDec, kFirst, kAtLeast},
    {"cache_level_filter",   &lwp::Capabilities::cache_level_filter,   0, 0, kOptional, kDec, kFirst, kAtLeast},
    {"cache_latency_filter", &lwp::Capabilities::cache_latency_filter, 0, 0, kOptional, kDec, kFirst, kAtLeast},
    {"enable_policy"},
    {"branch_prediction",    &lwp::Capabilities::branch_prediction,    0, 0, kOptional, kDec, kFirst, kSame, false},
    {"interrupt_vector"},
};

// The ESCR/CCCR T1 bits mean something with two threads only: a guest keeps what it saw.
inline constexpr Field<NetburstParams> kNetburst[] = {
    {"counters",         &NetburstParams::counters,          1, 18, kOptional, kDec, kMin, kAtLeast},
    {"counter_bits",     &NetburstParams::counter_bits,     32, 40, kOptional, kDec, kMin, kAtLeast},
    {"threads_per_core", &NetburstParams::threads_per_core,  1,  2, kOptional, kDec, kMin, kSame},
};

inline constexpr Field<ArchitecturalPmu> kArchitecturalPmu[] = {
    {"version",            &ArchitecturalPmu::version,             1,  5, kOptional, kDec, kMin, kAtLeast},
    {"counters",           &ArchitecturalPmu::counters,            1, 32, kOptional, kDec, kMin, kAtLeast},
    {"counter_bits",       &ArchitecturalPmu::counter_bits,       32, 64, kOptional, kDec, kMin, kAtLeast},
    {"fixed_counters",     &ArchitecturalPmu::fixed_counters,      0, 16, kOptional, kDec, kMin, kAtLeast},
    {"fixed_counter_bits", &ArchitecturalPmu::fixed_counter_bits, 32, 64, kOptional, kDec, kMin, kAtLeast},
    {"modelled_by_pmuvm",  &ArchitecturalPmu::modelled_by_pmuvm,   0,  0, kOptional, kDec, kMin, kSame, false},
    {"pebs",               &ArchitecturalPmu::pebs,                0,  0, kOptional, kDec, kMin, kSame, false},
    {"lbr",                &ArchitecturalPmu::lbr,                 0,  0, kOptional, kDec, kMin, kSame, false},
};

// The cache model's geometry: the guest never sees it through CPUID, so migration ignores it.
inline constexpr Field<CacheGeometry> kCache[] = {
    {"line_size",           &CacheGeometry::line_size,           16, 512,    kOptional, kDec, kFirst, kAny},
    {"l1d"},
    {"l2"},
    {"l3"},
    {"dram_latency_cycles", &CacheGeometry::dram_latency_cycles,  1, 100000, kRequired, kDec, kFirst, kAny},
};

inline constexpr Field<CacheLevel> kCacheLevel[] = {
    {"size_kib",       &CacheLevel::size_kib,       1, 1u << 20, kRequired, kDec, kFirst, kAny},
    {"ways",           &CacheLevel::ways,           1, 1024,     kRequired, kDec, kFirst, kAny},
    {"latency_cycles", &CacheLevel::latency_cycles, 1, 100000,   kRequired, kDec, kFirst, kAny},
};
// clang-format on

}  // namespace vmm::profile_schema
