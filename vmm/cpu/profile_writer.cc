#include "vmm/cpu/profile_writer.h"

#include <nlohmann/json.hpp>

#include "vmm/cpu/lwp_profile_names.h"
#include "vmm/cpu/profile_field_ops.h"
#include "vmm/cpu/profile_fields.h"
#include "vmm/cpu/profile_schema.h"

namespace vmm {
namespace {

namespace schema = profile_schema;
using Json = schema::WrittenJson;  // keys in the tables' order, so a written profile reads like one

// Values people read in hex (CPUID leaves and signatures, bit masks) are written as "0x..."
// strings, as in the shipped profiles; counts and sizes as numbers.
Json hex(uint64_t v) { return ProfileFields::hex(v); }

// A section's object: the table's numbers and flags, then what `custom` sets, in table order.
template <class S, size_t N, class Custom>
Json section(const schema::Field<S> (&table)[N], const S& s, Custom&& custom) {
  Json out = schema::skeleton(table);
  schema::write(out, table, s);
  custom(out);
  schema::drop_unset(out);
  return out;
}
template <class S, size_t N>
Json section(const schema::Field<S> (&table)[N], const S& s) {
  return section(table, s, [](Json&) {});
}

const char* register_name(CpuidRegister r) {
  switch (r) {
    case CpuidRegister::kEax: return "eax";
    case CpuidRegister::kEbx: return "ebx";
    case CpuidRegister::kEcx: return "ecx";
    case CpuidRegister::kEdx: return "edx";
  }
  return "eax";
}

Json overrides(const std::vector<CpuidOverride>& list) {
  Json out = Json::array();
  for (const CpuidOverride& o : list)
    out.push_back(section(schema::kCpuidOverride, o, [&](Json& j) {
      j["leaf"] = hex(o.leaf);
      j["subleaf"] = o.subleaf;
      j["register"] = register_name(o.reg);
      j["set"] = hex(o.set);
      j["clear"] = hex(o.clear);
      j["note"] = o.note;
    }));
  return out;
}

Json lwp(const CpuProfile& p) {
  const pmu::lwp::Capabilities& c = p.lwp;
  if (!c.available) return nullptr;
  return section(schema::kLwp, c, [&](Json& j) {
    j["available"] = true;
    Json events = Json::array();
    for (const LwpEventName& e : kLwpEvents)
      if (c.*e.offered) events.push_back(e.name);
    j["events"] = events;
    // The policy is written out even when it is everything offered (the parser's default), so
    // the text does not depend on that default.
    Json policy = Json::array();
    for (const LwpPolicyName& b : kLwpPolicyBits)
      if (p.lwp_enable_policy & b.bit) policy.push_back(b.name);
    j["enable_policy"] = policy;
    // The vector only means something with INT in the policy (the profile holds 0 otherwise).
    if (p.lwp_enable_policy & pmu::lwp::msr0::kInterrupt)
      j["interrupt_vector"] = hex(p.lwp_interrupt_vector);
  });
}

Json cache(const CacheGeometry& c) {
  return section(schema::kCache, c, [&](Json& j) {
    j["l1d"] = section(schema::kCacheLevel, c.l1d);
    j["l2"] = section(schema::kCacheLevel, c.l2);
    j["l3"] = c.l3 ? section(schema::kCacheLevel, *c.l3) : Json(nullptr);
  });
}

}  // namespace

std::string to_profile_json(const CpuProfile& p) {
  const Json profile = section(schema::kProfile, p, [&](Json& j) {
    j["name"] = p.name;
    j["description"] = p.description;
    j["vendor"] = p.vendor;
    j["brand"] = p.brand;
    j["max_basic_leaf"] = hex(p.max_basic_leaf);
    j["max_extended_leaf"] = hex(p.max_extended_leaf);
    j["features"] = p.features;
    j["address_sizes"] =
        p.address_sizes ? section(schema::kAddressSizes, *p.address_sizes) : Json(nullptr);
    j["cpuid_overrides"] = overrides(p.cpuid_overrides);
    j["misc_enable"] = p.misc_enable ? hex(*p.misc_enable) : Json(nullptr);
    j["lwp"] = lwp(p);
    j["netburst"] = p.netburst ? section(schema::kNetburst, *p.netburst) : Json(nullptr);
    // Left out when absent (older readers know no such key).
    if (p.architectural_pmu)
      j["architectural_pmu"] = section(schema::kArchitecturalPmu, *p.architectural_pmu);
    j["cache"] = cache(p.cache);
    if (!p.baseline_of.empty()) j["computed_from"] = p.baseline_of;
  });
  return profile.dump(2) + "\n";
}

}  // namespace vmm
