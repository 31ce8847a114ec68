#include "vmm/cpu/profile_baseline.h"

#include <algorithm>

#include "pmu/lwp/architecture.h"
#include "pmu/lwp/capabilities.h"
#include "vmm/cpu/profile_field_ops.h"
#include "vmm/cpu/profile_schema.h"
#include "vmm/result.h"

namespace vmm {
namespace {

namespace schema = profile_schema;

constexpr size_t kMaxNameLength = 64;  // the parser's limit for `name`

// An optional section in the baseline only if every member has it, with the table's minimum.
template <class S, size_t N>
std::optional<S> minimum_of(const std::vector<CpuProfile>& members,
                            std::optional<S> CpuProfile::*section,
                            const schema::Field<S> (&table)[N]) {
  std::optional<S> out = members.front().*section;
  for (const CpuProfile& m : members) {
    if (!out || !(m.*section)) return std::nullopt;
    schema::take_minimum(table, *out, *(m.*section));
  }
  return out;
}

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
  p.address_sizes = minimum_of(members, &CpuProfile::address_sizes, schema::kAddressSizes);
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

  p.netburst = minimum_of(members, &CpuProfile::netburst, schema::kNetburst);
  p.architectural_pmu =
      minimum_of(members, &CpuProfile::architectural_pmu, schema::kArchitecturalPmu);
  if (p.architectural_pmu && p.architectural_pmu->version < 2)
    p.architectural_pmu->fixed_counters = 0;  // version 1 has none
  if (const pmu::Status valid = lwp::validate(p.lwp); !valid.ok())
    return Error::usage("the computed LWP capabilities are invalid: " + valid.reason());
  return {};
}

}  // namespace detail
}  // namespace vmm
