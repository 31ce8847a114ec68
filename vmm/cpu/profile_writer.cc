#include "vmm/cpu/profile_writer.h"

#include <nlohmann/json.hpp>

#include "vmm/cpu/profile_fields.h"
#include "vmm/cpu/lwp_profile_names.h"

namespace vmm {
namespace {

// Keys in the order of the README and the shipped files, so a written profile reads like one.
using Json = nlohmann::ordered_json;

// Values people read in hex (CPUID leaves and signatures, bit masks) are written as "0x..."
// strings, as in the shipped profiles; counts and sizes as numbers.
Json hex(uint64_t v) { return ProfileFields::hex(v); }

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
    out.push_back(Json{{"leaf", hex(o.leaf)},
                       {"subleaf", o.subleaf},
                       {"register", register_name(o.reg)},
                       {"set", hex(o.set)},
                       {"clear", hex(o.clear)},
                       {"note", o.note}});
  return out;
}

Json lwp(const CpuProfile& p) {
  const pmu::lwp::Capabilities& c = p.lwp;
  if (!c.available) return nullptr;
  Json events = Json::array();
  for (const LwpEventName& e : kLwpEvents)
    if (c.*e.offered) events.push_back(e.name);
  // The policy is written out even when it is everything offered (the parser's default), so the
  // text does not depend on that default.
  Json policy = Json::array();
  for (const LwpPolicyName& b : kLwpPolicyBits)
    if (p.lwp_enable_policy & b.bit) policy.push_back(b.name);
  Json out = {{"available", true},
              {"version", c.version},
              {"interrupt", c.interrupt},
              {"events", events},
              {"max_events", c.max_events},
              {"cache_max_bits", c.cache_max_bits},
              {"data_address", c.data_address},
              {"cache_level_filter", c.cache_level_filter},
              {"cache_latency_filter", c.cache_latency_filter},
              {"enable_policy", policy}};
  if (!c.branch_prediction) out["branch_prediction"] = false;  // true is the parser's default
  // The vector only means something with INT in the policy (the profile holds 0 otherwise).
  if (p.lwp_enable_policy & pmu::lwp::msr0::kInterrupt)
    out["interrupt_vector"] = hex(p.lwp_interrupt_vector);
  return out;
}

Json level(const CacheLevel& l) {
  return Json{{"size_kib", l.size_kib}, {"ways", l.ways}, {"latency_cycles", l.latency_cycles}};
}

Json cache(const CacheGeometry& c) {
  return Json{{"line_size", c.line_size},
              {"l1d", level(c.l1d)},
              {"l2", level(c.l2)},
              {"l3", c.l3 ? level(*c.l3) : Json(nullptr)},
              {"dram_latency_cycles", c.dram_latency_cycles}};
}

}  // namespace

std::string to_profile_json(const CpuProfile& p) {
  Json j;
  j["name"] = p.name;
  j["description"] = p.description;
  j["vendor"] = p.vendor;
  j["family"] = hex(p.family);
  j["model"] = hex(p.model);
  j["stepping"] = p.stepping;
  j["brand"] = p.brand;
  j["max_basic_leaf"] = hex(p.max_basic_leaf);
  j["max_extended_leaf"] = hex(p.max_extended_leaf);
  j["features"] = p.features;
  j["address_sizes"] = p.address_sizes ? Json{{"physical", p.address_sizes->physical},
                                              {"linear", p.address_sizes->linear}}
                                       : Json(nullptr);
  j["cpuid_overrides"] = overrides(p.cpuid_overrides);
  j["misc_enable"] = p.misc_enable ? hex(*p.misc_enable) : Json(nullptr);
  j["lwp"] = lwp(p);
  j["netburst"] = p.netburst ? Json{{"counters", p.netburst->counters},
                                    {"counter_bits", p.netburst->counter_bits},
                                    {"threads_per_core", p.netburst->threads_per_core}}
                             : Json(nullptr);
  if (const std::optional<ArchitecturalPmu>& a = p.architectural_pmu)
    j["architectural_pmu"] = Json{{"version", a->version},
                                  {"counters", a->counters},
                                  {"counter_bits", a->counter_bits},
                                  {"fixed_counters", a->fixed_counters},
                                  {"fixed_counter_bits", a->fixed_counter_bits}};
  j["cache"] = cache(p.cache);
  if (!p.baseline_of.empty()) j["computed_from"] = p.baseline_of;
  return j.dump(2) + "\n";
}

}  // namespace vmm
