#include "vmm/cpu/migration_check.h"

#include <algorithm>

#include "vmm/cpu/profile_fields.h"
#include "vmm/cpu/lwp_profile_names.h"

namespace vmm {
namespace {

using Reasons = std::vector<std::string>;

void equal_hex(Reasons& out, const char* what, uint64_t saw, uint64_t has) {
  if (saw != has)
    out.push_back(std::string(what) + " " + ProfileFields::hex(saw) +
                  " != " + ProfileFields::hex(has));
}

void at_least(Reasons& out, const std::string& what, uint64_t saw, uint64_t has) {
  if (has < saw) out.push_back(what + " " + std::to_string(has) + " < " + std::to_string(saw));
}

void identity(Reasons& out, const CpuProfile& saw, const CpuProfile& has) {
  if (saw.vendor != has.vendor) out.push_back("vendor " + saw.vendor + " != " + has.vendor);
  equal_hex(out, "family", saw.family, has.family);
  equal_hex(out, "model", saw.model, has.model);
}

void features(Reasons& out, const CpuProfile& saw, const CpuProfile& has) {
  for (const std::string& f : saw.features)
    if (std::find(has.features.begin(), has.features.end(), f) == has.features.end())
      out.push_back("CPUID feature " + f + " missing");
  if (!saw.address_sizes) return;
  if (!has.address_sizes) {
    out.push_back("address_sizes missing");
    return;
  }
  at_least(out, "address_sizes.physical", saw.address_sizes->physical, has.address_sizes->physical);
  at_least(out, "address_sizes.linear", saw.address_sizes->linear, has.address_sizes->linear);
}

void lwp(Reasons& out, const pmu::lwp::Capabilities& saw, const pmu::lwp::Capabilities& has) {
  if (!saw.available) return;
  if (!has.available) {
    out.push_back("LWP missing");  // every other LWP reason would follow from this one
    return;
  }
  if (saw.version != has.version)
    out.push_back("LWP version " + std::to_string(saw.version) +
                  " != " + std::to_string(has.version));
  auto flag = [&](std::string_view name, bool pmu::lwp::Capabilities::*member) {
    if (saw.*member && !(has.*member))
      out.push_back("LWP feature " + std::string(name) + " missing");
  };
  for (const LwpEventName& e : kLwpEvents) flag(e.name, e.offered);
  for (const LwpFlagName& f : kLwpFlags) flag(f.key, f.member);
  if (saw.branch_prediction != has.branch_prediction)
    out.push_back(std::string("LWP branch_prediction ") +
                  (saw.branch_prediction ? "true" : "false") +
                  " != " + (has.branch_prediction ? "true" : "false"));
  at_least(out, "LWP max_events", saw.max_events, has.max_events);
  at_least(out, "LWP cache_max_bits", saw.cache_max_bits, has.cache_max_bits);
}

void netburst(Reasons& out, const CpuProfile& saw, const CpuProfile& has) {
  if (!saw.netburst) return;
  if (!has.netburst) {
    out.push_back("NetBurst PMU missing");
    return;
  }
  at_least(out, "NetBurst counters", saw.netburst->counters, has.netburst->counters);
  at_least(out, "NetBurst counter_bits", saw.netburst->counter_bits, has.netburst->counter_bits);
  if (saw.netburst->threads_per_core != has.netburst->threads_per_core)
    out.push_back("NetBurst threads_per_core " + std::to_string(saw.netburst->threads_per_core) +
                  " != " + std::to_string(has.netburst->threads_per_core));
}

void architectural_pmu(Reasons& out, const CpuProfile& saw, const CpuProfile& has) {
  if (!saw.architectural_pmu) return;
  if (!has.architectural_pmu) {
    out.push_back("architectural PMU (CPUID 0xA) missing");
    return;
  }
  const ArchitecturalPmu &a = *saw.architectural_pmu, &b = *has.architectural_pmu;
  at_least(out, "architectural PMU version", a.version, b.version);
  at_least(out, "architectural PMU counters", a.counters, b.counters);
  at_least(out, "architectural PMU counter_bits", a.counter_bits, b.counter_bits);
  at_least(out, "architectural PMU fixed_counters", a.fixed_counters, b.fixed_counters);
  at_least(out, "architectural PMU fixed_counter_bits", a.fixed_counter_bits, b.fixed_counter_bits);
}

}  // namespace

std::vector<std::string> migration_refusals(const CpuProfile& guest_saw,
                                            const CpuProfile& destination) {
  Reasons out;
  identity(out, guest_saw, destination);
  features(out, guest_saw, destination);
  lwp(out, guest_saw.lwp, destination.lwp);
  netburst(out, guest_saw, destination);
  architectural_pmu(out, guest_saw, destination);
  return out;
}

std::string describe_verdict(std::string_view from, std::string_view to,
                             const std::vector<std::string>& refusals) {
  std::string s = "migration from " + std::string(from) + " to " + std::string(to) + ": " +
                  (refusals.empty() ? "accepted" : "refused") + "\n";
  for (const std::string& r : refusals) s += "  " + r + "\n";
  return s;
}

}  // namespace vmm
