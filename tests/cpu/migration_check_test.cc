// The migration compatibility rule of DESIGN §4.10 (vmm/cpu/migration_check.h): the verdict for
// every ordered pair of shipped profiles and the computed amd-lwp + amd-lwp-lite baseline, each
// written out with why; and hand-made destinations that each lack exactly one thing and get
// exactly that one reason.
#include "vmm/cpu/migration_check.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "tests/cpu/builtin_profile.h"
#include "vmm/cpu/cpu_profile.h"
#include "vmm/cpu/profile_baseline.h"

namespace vmm {
namespace {

using vmm::testing::Builtin;
using Reasons = std::vector<std::string>;

// The five profiles of a migration set the tests reason about.
std::map<std::string, CpuProfile> Profiles() {
  std::map<std::string, CpuProfile> m;
  for (const char* n : {"amd-lwp", "amd-lwp-lite", "amd-lwp-baseline", "intel-netburst"})
    m[n] = Builtin(n);
  Result<CpuProfile> computed = compute_baseline({m["amd-lwp"], m["amd-lwp-lite"]});
  EXPECT_TRUE(computed.ok()) << computed.error().message;
  m["computed"] = *computed;
  return m;
}

// What amd-lwp's kernel relies on and amd-lwp-lite (and so the baseline) lacks: every LWP
// capability but IRE, and two of its three event slots; in the order of the `lwp` section's keys.
const Reasons kFullLwpOnLiteLwp = {
    "LWP feature interrupt missing",
    "LWP feature BRE missing",
    "LWP feature DME missing",
    "LWP max_events 1 < 3",
    "LWP feature data_address missing",
    "LWP feature cache_level_filter missing",
    "LWP feature cache_latency_filter missing",
};

// The AMD profiles' x86 features that the Pentium 4 profile lacks (SSSE3 and later, AMD's own
// extensions, the 1 GiB pages and RDTSCP), in the AMD profiles' order.
const Reasons kAmdFeaturesOnNetburst = {
    "CPUID feature pclmulqdq missing",   "CPUID feature ssse3 missing",
    "CPUID feature sse4_1 missing",      "CPUID feature sse4_2 missing",
    "CPUID feature popcnt missing",      "CPUID feature aes missing",
    "CPUID feature lahf_lm missing",     "CPUID feature cr8_legacy missing",
    "CPUID feature abm missing",         "CPUID feature sse4a missing",
    "CPUID feature misalignsse missing", "CPUID feature 3dnowprefetch missing",
    "CPUID feature mmxext missing",      "CPUID feature fxsr_opt missing",
    "CPUID feature pdpe1gb missing",     "CPUID feature rdtscp missing",
};

Reasons Concat(std::initializer_list<Reasons> parts) {
  Reasons all;
  for (const Reasons& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

// An AMD guest on the Pentium 4 profile: another vendor, family and model, 16 features, the
// 48-bit physical addresses (the P4 has 36), and LWP.
Reasons AmdOnNetburst(const char* model) {
  return Concat({{"vendor AuthenticAMD != GenuineIntel", "family 0x15 != 0xf",
                  std::string("model ") + model + " != 0x4"},
                 kAmdFeaturesOnNetburst,
                 {"address_sizes.physical 36 < 48", "LWP missing"}});
}

// The Pentium 4 guest on an AMD profile: vendor, family, model, the SS bit (self snoop, which
// the AMD profiles leave out) and the NetBurst PMU. Addresses: AMD's 48 bits cover its 36.
Reasons NetburstOnAmd(const char* model) {
  return {"vendor GenuineIntel != AuthenticAMD", "family 0xf != 0x15",
          std::string("model 0x4 != ") + model, "CPUID feature ss missing", "NetBurst PMU missing"};
}

TEST(MigrationCheck, EveryOrderedPairOfTheMigrationSet) {
  const std::map<std::string, CpuProfile> p = Profiles();
  struct Case {
    const char* from;
    const char* to;
    Reasons want;
  };
  const std::vector<Case> cases = {
      // A guest on its own profile is always accepted.
      {"amd-lwp", "amd-lwp", {}},
      {"amd-lwp-lite", "amd-lwp-lite", {}},
      {"amd-lwp-baseline", "amd-lwp-baseline", {}},
      {"intel-netburst", "intel-netburst", {}},
      {"computed", "computed", {}},
      // amd-lwp's guest saw model 0x1 and the full LWP: lite is another model with less LWP;
      // the baselines keep model 0x1 (their first member's) but have only lite's LWP.
      {"amd-lwp", "amd-lwp-lite", Concat({{"model 0x1 != 0x10"}, kFullLwpOnLiteLwp})},
      {"amd-lwp", "amd-lwp-baseline", kFullLwpOnLiteLwp},
      {"amd-lwp", "computed", kFullLwpOnLiteLwp},
      {"amd-lwp", "intel-netburst", AmdOnNetburst("0x1")},
      // lite's guest needs nothing amd-lwp lacks but its model number (0x10).
      {"amd-lwp-lite", "amd-lwp", {"model 0x10 != 0x1"}},
      {"amd-lwp-lite", "amd-lwp-baseline", {"model 0x10 != 0x1"}},
      {"amd-lwp-lite", "computed", {"model 0x10 != 0x1"}},
      {"amd-lwp-lite", "intel-netburst", AmdOnNetburst("0x10")},
      // The baseline is what it is for: its guest runs on amd-lwp (same model, more LWP) ...
      {"amd-lwp-baseline", "amd-lwp", {}},
      // ... but not on lite, whose model differs: a baseline of processors with different
      // models takes the first member's identity (README, "Baseline profiles").
      {"amd-lwp-baseline", "amd-lwp-lite", {"model 0x1 != 0x10"}},
      {"amd-lwp-baseline", "computed", {}},  // the same CPU under another name
      {"amd-lwp-baseline", "intel-netburst", AmdOnNetburst("0x1")},
      {"computed", "amd-lwp", {}},
      {"computed", "amd-lwp-lite", {"model 0x1 != 0x10"}},
      {"computed", "amd-lwp-baseline", {}},
      {"computed", "intel-netburst", AmdOnNetburst("0x1")},
      {"intel-netburst", "amd-lwp", NetburstOnAmd("0x1")},
      {"intel-netburst", "amd-lwp-lite", NetburstOnAmd("0x10")},
      {"intel-netburst", "amd-lwp-baseline", NetburstOnAmd("0x1")},
      {"intel-netburst", "computed", NetburstOnAmd("0x1")},
  };
  ASSERT_EQ(cases.size(), p.size() * p.size()) << "every ordered pair, once";
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.from) + " -> " + c.to);
    EXPECT_EQ(migration_refusals(p.at(c.from), p.at(c.to)), c.want);
  }
}

// A guest that saw everything a profile can describe, including NetBurst (only the struct
// matters here, not whether a file could say it).
CpuProfile RichGuest() {
  CpuProfile g = Builtin("amd-lwp");
  g.lwp.max_events = 4;
  g.lwp.cache_max_bits = 12;
  g.address_sizes = AddressSizes{48, 57};
  g.netburst = NetburstParams{18, 40, 1};
  return g;
}

TEST(MigrationCheck, EachMissingThingIsExactlyOneReason) {
  const CpuProfile guest = RichGuest();
  struct Case {
    const char* what;
    void (*change)(CpuProfile&);
    const char* want;
  };
  const std::vector<Case> cases = {
      {"vendor", [](CpuProfile& d) { d.vendor = "GenuineIntel"; },
       "vendor AuthenticAMD != GenuineIntel"},
      {"family", [](CpuProfile& d) { d.family = 0xF; }, "family 0x15 != 0xf"},
      {"model", [](CpuProfile& d) { d.model = 2; }, "model 0x1 != 0x2"},
      {"a feature",
       [](CpuProfile& d) {
         d.features.erase(std::find(d.features.begin(), d.features.end(), "sse4_2"));
       },
       "CPUID feature sse4_2 missing"},
      {"address sizes", [](CpuProfile& d) { d.address_sizes.reset(); }, "address_sizes missing"},
      {"physical bits", [](CpuProfile& d) { d.address_sizes->physical = 40; },
       "address_sizes.physical 40 < 48"},
      {"linear bits", [](CpuProfile& d) { d.address_sizes->linear = 48; },
       "address_sizes.linear 48 < 57"},
      {"LWP", [](CpuProfile& d) { d.lwp = {}; }, "LWP missing"},
      {"LWP version", [](CpuProfile& d) { d.lwp.version = 2; }, "LWP version 1 != 2"},
      {"IRE", [](CpuProfile& d) { d.lwp.instructions_retired = false; }, "LWP feature IRE missing"},
      {"BRE", [](CpuProfile& d) { d.lwp.branches_retired = false; }, "LWP feature BRE missing"},
      {"DME", [](CpuProfile& d) { d.lwp.dcache_misses = false; }, "LWP feature DME missing"},
      {"interrupt", [](CpuProfile& d) { d.lwp.interrupt = false; },
       "LWP feature interrupt missing"},
      {"data address", [](CpuProfile& d) { d.lwp.data_address = false; },
       "LWP feature data_address missing"},
      {"cache-level filter", [](CpuProfile& d) { d.lwp.cache_level_filter = false; },
       "LWP feature cache_level_filter missing"},
      {"latency filter", [](CpuProfile& d) { d.lwp.cache_latency_filter = false; },
       "LWP feature cache_latency_filter missing"},
      {"event slots", [](CpuProfile& d) { d.lwp.max_events = 3; }, "LWP max_events 3 < 4"},
      {"latency bits", [](CpuProfile& d) { d.lwp.cache_max_bits = 10; },
       "LWP cache_max_bits 10 < 12"},
      {"NetBurst", [](CpuProfile& d) { d.netburst.reset(); }, "NetBurst PMU missing"},
      {"counters", [](CpuProfile& d) { d.netburst->counters = 8; }, "NetBurst counters 8 < 18"},
      {"counter width", [](CpuProfile& d) { d.netburst->counter_bits = 32; },
       "NetBurst counter_bits 32 < 40"},
      {"threads", [](CpuProfile& d) { d.netburst->threads_per_core = 2; },
       "NetBurst threads_per_core 1 != 2"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    CpuProfile destination = guest;
    c.change(destination);
    EXPECT_EQ(migration_refusals(guest, destination), Reasons{c.want});
  }
}

TEST(MigrationCheck, WhatTheGuestKeepsIsNotCompared) {
  const CpuProfile guest = RichGuest();
  CpuProfile d = guest;
  d.name = "other";
  d.description = "other";
  d.source = "elsewhere.json";
  d.stepping = 9;
  d.brand = "another brand";
  d.max_basic_leaf = 7;
  d.max_extended_leaf = 0x80000008;
  d.cpuid_overrides = {CpuidOverride{1, 0, CpuidRegister::kEcx, 1, 0, "x"}};
  d.misc_enable = 0;
  d.lwp_enable_policy = 0;
  d.lwp_interrupt_vector = 0;
  d.cache.l3.reset();
  d.baseline_of = {"a", "b"};
  EXPECT_EQ(migration_refusals(guest, d), Reasons{});
}

TEST(MigrationCheck, MoreAtTheDestinationIsFine) {
  const CpuProfile guest = Builtin("amd-lwp-lite");
  CpuProfile d = guest;
  d.features.push_back("avx2");
  d.address_sizes = AddressSizes{52, 57};
  d.lwp = Builtin("amd-lwp").lwp;
  d.lwp.max_events = 26;
  d.lwp.cache_max_bits = 31;
  d.netburst = NetburstParams{};  // the guest saw none: nothing to compare
  EXPECT_EQ(migration_refusals(guest, d), Reasons{});
  EXPECT_EQ(migration_refusals(Builtin("intel-netburst"), Builtin("intel-netburst")), Reasons{});
}

TEST(MigrationCheck, DescribeVerdict) {
  EXPECT_EQ(describe_verdict("amd-lwp-lite", "amd-lwp-lite", {}),
            "migration from amd-lwp-lite to amd-lwp-lite: accepted\n");
  EXPECT_EQ(describe_verdict("a.json", "amd-lwp", {"model 0x10 != 0x1", "LWP missing"}),
            "migration from a.json to amd-lwp: refused\n"
            "  model 0x10 != 0x1\n"
            "  LWP missing\n");
}

}  // namespace
}  // namespace vmm
