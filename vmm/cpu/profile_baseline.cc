#include "vmm/cpu/profile_baseline.h"

#include <algorithm>

#include "pmu/lwp/architecture.h"
#include "pmu/lwp/capabilities.h"
#include "vmm/result.h"

namespace vmm {
namespace {

constexpr size_t kMaxNameLength = 64;  // the parser's limit for `name`

std::string baseline_name(const std::vector<CpuProfile>& members) {
  std::string name = "baseline-of";
  for (const CpuProfile& m : members) name += "-" + m.name;
  if (name.size() > kMaxNameLength)
    name = "baseline-of-" + std::to_string(members.size()) + "-profiles";
  return name;
}

}  // namespace

Result<CpuProfile> compute_baseline(const std::vector<CpuProfile>& members) {
  if (members.empty()) return Error::usage("a baseline needs at least one profile");
  CpuProfile p;
  p.name = baseline_name(members);
  std::string names;
  for (const CpuProfile& m : members) {
    p.baseline_of.push_back(m.name);
    names += (names.empty() ? "" : ", ") + m.name;
  }
  p.description = "Migration baseline of " + names +
                  " (proposal 5.1: the AND of their feature "
                  "bits and the minimum of their event counts and sizes), computed by pmuvm.";
  if (const Status composed = detail::compose_baseline(members, p); !composed.ok())
    return Error::usage("baseline of " + names + ": " + composed.error().message);
  return p;
}

namespace detail {

namespace lwp = pmu::lwp;

Status compose_baseline(const std::vector<CpuProfile>& members, CpuProfile& p) {
  if (members.empty()) return Error::usage("a baseline needs at least one member");
  const CpuProfile& first = members.front();
  p.vendor = first.vendor;
  p.family = first.family;
  p.model = first.model;
  p.stepping = first.stepping;
  p.brand = first.brand;
  p.max_basic_leaf = first.max_basic_leaf;
  p.max_extended_leaf = first.max_extended_leaf;
  // The guest may only see a feature every member offers: the AND, in the first member's order.
  p.features.clear();
  for (const std::string& f : first.features)
    if (std::all_of(members.begin(), members.end(), [&](const CpuProfile& m) {
          return std::find(m.features.begin(), m.features.end(), f) != m.features.end();
        }))
      p.features.push_back(f);
  p.address_sizes = first.address_sizes;
  for (const CpuProfile& m : members) {
    if (!m.address_sizes || !p.address_sizes) {
      p.address_sizes.reset();
      break;
    }
    p.address_sizes->physical = std::min(p.address_sizes->physical, m.address_sizes->physical);
    p.address_sizes->linear = std::min(p.address_sizes->linear, m.address_sizes->linear);
  }
  p.cpuid_overrides = first.cpuid_overrides;
  p.misc_enable = first.misc_enable;
  p.cache = first.cache;

  std::vector<lwp::Capabilities> caps;
  for (const CpuProfile& m : members) caps.push_back(m.lwp);
  p.lwp = lwp::baseline(caps);
  p.lwp_enable_policy = 0;
  p.lwp_interrupt_vector = 0;
  if (p.lwp.available) {
    // AND of what every member's kernel enables, limited to what the baseline still offers
    // (baseline() may have dropped DME); the vector bits are not ANDed but taken from the first.
    uint64_t flags = lwp::msr0::kWritableMask & ~lwp::msr0::kVectorMask;
    for (const CpuProfile& m : members) flags &= m.lwp_enable_policy;
    flags &= p.lwp.msr0_allowed();
    if (!(flags & lwp::msr0::kEnabled)) flags = 0;  // nothing is on without EN
    if (flags & lwp::msr0::kInterrupt) {
      p.lwp_interrupt_vector = first.lwp_interrupt_vector;
      flags |= uint64_t{first.lwp_interrupt_vector} << lwp::msr0::kVectorShift;
    }
    p.lwp_enable_policy = flags;
  }

  p.netburst.reset();
  const bool all_netburst = std::all_of(members.begin(), members.end(),
                                        [](const CpuProfile& m) { return m.netburst.has_value(); });
  if (all_netburst) {
    NetburstParams n = *first.netburst;
    for (const CpuProfile& m : members) {
      n.counters = std::min(n.counters, m.netburst->counters);
      n.counter_bits = std::min(n.counter_bits, m.netburst->counter_bits);
      n.threads_per_core = std::min(n.threads_per_core, m.netburst->threads_per_core);
    }
    p.netburst = n;
  }
  p.architectural_pmu.reset();
  if (std::all_of(members.begin(), members.end(),
                  [](const CpuProfile& m) { return m.architectural_pmu.has_value(); })) {
    ArchitecturalPmu a = *first.architectural_pmu;
    for (const CpuProfile& m : members) {
      const ArchitecturalPmu& b = *m.architectural_pmu;
      a.version = std::min(a.version, b.version);
      a.counters = std::min(a.counters, b.counters);
      a.counter_bits = std::min(a.counter_bits, b.counter_bits);
      a.fixed_counters = std::min(a.fixed_counters, b.fixed_counters);
      a.fixed_counter_bits = std::min(a.fixed_counter_bits, b.fixed_counter_bits);
    }
    if (a.version < 2) a.fixed_counters = 0;
    p.architectural_pmu = a;
  }
  if (const pmu::Status valid = lwp::validate(p.lwp); !valid.ok())
    return Error::usage("the computed LWP capabilities are invalid: " + valid.reason());
  return {};
}

}  // namespace detail
}  // namespace vmm
