#include "vmm/cpu/migration_check.h"

#include "vmm/cpu/lwp_profile_names.h"
#include "vmm/cpu/profile_field_ops.h"
#include "vmm/cpu/profile_schema.h"

namespace vmm {
namespace {

namespace schema = profile_schema;
using Reasons = std::vector<std::string>;

// An optional section: missing at the destination is one reason (every other would follow from
// it); present on both, the table's rows.
template <class S, size_t N>
void section(Reasons& out, const std::optional<S>& saw, const std::optional<S>& has,
             const char* missing, std::string_view label, const schema::Field<S> (&table)[N]) {
  if (!saw) return;
  if (!has) {
    out.push_back(missing);
    return;
  }
  schema::refuse(out, label, table, *saw, *has);
}

void lwp(Reasons& out, const pmu::lwp::Capabilities& saw, const pmu::lwp::Capabilities& has) {
  if (!saw.available) return;
  if (!has.available) {
    out.push_back("LWP missing");
    return;
  }
  schema::refuse(out, "LWP ", schema::kLwp, saw, has, [&](std::string_view key) {
    if (key != "events") return;
    for (const LwpEventName& e : kLwpEvents)
      if (saw.*e.offered && !(has.*e.offered))
        out.push_back("LWP feature " + std::string(e.name) + " missing");
  });
}

}  // namespace

std::vector<std::string> migration_refusals(const CpuProfile& guest_saw,
                                            const CpuProfile& destination) {
  Reasons out;
  if (guest_saw.vendor != destination.vendor)
    out.push_back("vendor " + guest_saw.vendor + " != " + destination.vendor);
  schema::refuse(out, "", schema::kProfile, guest_saw, destination);  // family, model
  for (const std::string& f : guest_saw.features)
    if (!destination.has_feature(f)) out.push_back("CPUID feature " + f + " missing");
  section(out, guest_saw.address_sizes, destination.address_sizes, "address_sizes missing",
          "address_sizes.", schema::kAddressSizes);
  lwp(out, guest_saw.lwp, destination.lwp);
  section(out, guest_saw.netburst, destination.netburst, "NetBurst PMU missing", "NetBurst ",
          schema::kNetburst);
  section(out, guest_saw.architectural_pmu, destination.architectural_pmu,
          "architectural PMU (CPUID 0xA) missing", "architectural PMU ", schema::kArchitecturalPmu);
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
