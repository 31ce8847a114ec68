#include "vmm/cpu/describe_profile.h"

#include <cstdio>
#include <string>

#include "pmu/lwp/architecture.h"
#include "pmu/lwp/capabilities.h"
#include "vmm/cpu/cpuid_table.h"
#include "vmm/cpu/lwp_profile_names.h"
#include "vmm/cpu/profile_field_ops.h"
#include "vmm/cpu/profile_schema.h"

namespace vmm {
namespace {

namespace lwp = pmu::lwp;

std::string hex(uint64_t v, int width = 0) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%0*llx", width, static_cast<unsigned long long>(v));
  return buf;
}

std::string level(const char* name, const CacheLevel& l) {
  return std::string(name) + " " + profile_schema::describe(profile_schema::kCacheLevel, l);
}

std::string policy_names(uint64_t policy) {
  std::string s;
  for (const LwpPolicyName& b : kLwpPolicyBits)
    if (policy & b.bit) s += (s.empty() ? "" : "|") + std::string(b.name);
  return s.empty() ? "none" : s;
}

std::string describe_lwp(const CpuProfile& p) {
  const lwp::Capabilities& c = p.lwp;
  if (!c.available) return "  LWP          none\n";
  std::string events;
  for (const LwpEventName& e : kLwpEvents)
    if (c.*e.offered) events += " " + std::string(e.name);
  // The summary, then the declared fields (profile_schema.h), then what they make.
  std::string s = "  LWP          events" + events + ", " + std::to_string(c.max_events) +
                  " slot(s) (LWPCB " + std::to_string(c.lwpcb_size()) + " bytes), " +
                  (c.interrupt ? "threshold interrupt" : "no interrupt") + "\n";
  s += "               " + profile_schema::describe(profile_schema::kLwp, c) + "\n";
  s += "               enable policy " + policy_names(p.lwp_enable_policy);
  if (p.lwp_enable_policy & lwp::msr0::kInterrupt) s += ", vector " + hex(p.lwp_interrupt_vector);
  s += " (LWPMSR0 " + hex(p.lwp_enable_policy) + ")\n";
  const lwp::CpuidLeaf l = lwp::cpuid_leaf(c, p.lwp_enable_policy);
  s += "               CPUID 0x8000001C eax=" + hex(l.eax, 8) + " ebx=" + hex(l.ebx, 8) +
       " ecx=" + hex(l.ecx, 8) + " edx=" + hex(l.edx, 8) + "\n";
  return s;
}

// The profile's CPUID definition and the table it gives (before KVM filtering, which depends on
// the host): one line per leaf.
std::string describe_cpuid(const CpuProfile& p) {
  std::string s = "  CPUID        max basic leaf " + hex(p.max_basic_leaf) +
                  ", max extended leaf " + hex(p.max_extended_leaf);
  if (p.address_sizes)
    s += ", " + std::to_string(p.address_sizes->physical) + "-bit physical, " +
         std::to_string(p.address_sizes->linear) + "-bit linear addresses";
  s += "\n  features    ";
  for (const std::string& f : p.features) s += " " + f;
  if (p.features.empty()) s += " none";
  s += "\n";
  for (const CpuidEntry& e : profile_cpuid(p, 0)) {
    if (e.function >= kPvCpuidBase && e.function <= 0x4FFFFFFF)
      continue;  // the VMM's, not the profile's
    s += "  leaf " + hex(e.function, 8) + "." + std::to_string(e.index) + " eax=" + hex(e.eax, 8) +
         " ebx=" + hex(e.ebx, 8) + " ecx=" + hex(e.ecx, 8) + " edx=" + hex(e.edx, 8) + "\n";
  }
  return s;
}

const char* reg_name(CpuidRegister r) {
  switch (r) {
    case CpuidRegister::kEax: return "eax";
    case CpuidRegister::kEbx: return "ebx";
    case CpuidRegister::kEcx: return "ecx";
    case CpuidRegister::kEdx: return "edx";
  }
  return "?";
}

}  // namespace

std::string describe_profile(const CpuProfile& p) {
  std::string s = p.name + " - " + p.description + "\n";
  s += "  processor    " + p.vendor + " family " + hex(p.family) + " model " + hex(p.model) +
       " stepping " + std::to_string(p.stepping) + ", \"" + p.brand + "\"\n";
  s += describe_cpuid(p);
  s += describe_lwp(p);
  if (p.netburst)
    s += "  NetBurst     " + profile_schema::describe(profile_schema::kNetburst, *p.netburst) +
         (p.netburst->threads_per_core == 1 ? " (T1 bits inert)" : "") + "\n";
  else
    s += "  NetBurst     none\n";
  if (const std::optional<ArchitecturalPmu>& a = p.architectural_pmu)
    s += "  arch. PMU    CPUID 0xA " +
         profile_schema::describe(profile_schema::kArchitecturalPmu, *a) +
         (a->modelled_by_pmuvm ? " (pmuvm's model, on any host)\n"
                               : " (KVM's vPMU, where the host has a PMU)\n");
  s += "  MISC_ENABLE  " + (p.misc_enable ? hex(*p.misc_enable) : std::string("not set")) + "\n";
  const CacheGeometry& c = p.cache;
  s += "  cache        " + profile_schema::describe(profile_schema::kCache, c) + "; " +
       level("L1D", c.l1d) + "; " + level("L2", c.l2) + "; " +
       (c.l3 ? level("L3", *c.l3) : std::string("no L3")) + "\n";
  for (const CpuidOverride& ov : p.cpuid_overrides) {
    s += "  override     CPUID " + hex(ov.leaf) + "." + std::to_string(ov.subleaf) + " " +
         reg_name(ov.reg);
    if (ov.clear) s += " clear " + hex(ov.clear);
    if (ov.set) s += " set " + hex(ov.set);
    if (!ov.note.empty()) s += " (" + ov.note + ")";
    s += "\n";
  }
  if (!p.baseline_of.empty()) {
    s += "  baseline of ";
    for (size_t i = 0; i < p.baseline_of.size(); ++i) s += (i ? ", " : "") + p.baseline_of[i];
    s += "\n";
  }
  s += "  source       " + p.source + "\n";
  return s;
}

}  // namespace vmm
