#include "vmm/cpu/cpuid_table.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "pmu/lwp/architecture.h"
#include "pmu/lwp/capabilities.h"

namespace vmm {
namespace {

namespace lwp = pmu::lwp;

constexpr uint32_t kBasicMax = 0x0;
constexpr uint32_t kSignature = 0x1;
constexpr uint32_t kExtendedMax = 0x80000000;
constexpr uint32_t kBrandFirst = 0x80000002;
constexpr uint32_t kBrandLast = 0x80000004;

// Four bytes of `s` from `offset`, little-endian, NUL beyond its end (how CPUID packs strings).
uint32_t chars4(const std::string& s, size_t offset) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) {
    const size_t k = offset + i;
    const uint8_t c = k < s.size() ? static_cast<uint8_t>(s[k]) : 0;
    v |= uint32_t{c} << (8 * i);
  }
  return v;
}

// The entry for (function, index), created (flags 0) if the table has none.
CpuidEntry& entry(std::vector<CpuidEntry>& table, uint32_t function, uint32_t index = 0) {
  for (CpuidEntry& e : table)
    if (e.function == function &&
        (!(e.flags & kCpuidFlagSignificantIndex) || e.index == index))
      return e;
  // A new subleaf of a leaf the host indexes (e.g. 0xD) must be indexed too, or it would shadow
  // every other subleaf.
  const bool indexed = std::any_of(table.begin(), table.end(), [&](const CpuidEntry& e) {
    return e.function == function && (e.flags & kCpuidFlagSignificantIndex);
  });
  table.push_back(CpuidEntry{function, index, indexed ? kCpuidFlagSignificantIndex : 0, 0, 0, 0, 0});
  return table.back();
}

uint32_t& reg(CpuidEntry& e, CpuidRegister r) {
  switch (r) {
    case CpuidRegister::kEax: return e.eax;
    case CpuidRegister::kEbx: return e.ebx;
    case CpuidRegister::kEcx: return e.ecx;
    case CpuidRegister::kEdx: return e.edx;
  }
  return e.eax;
}

void set_vendor(CpuidEntry& e, const std::string& vendor) {
  // CPUID orders the vendor string EBX, EDX, ECX.
  e.ebx = chars4(vendor, 0);
  e.edx = chars4(vendor, 4);
  e.ecx = chars4(vendor, 8);
}

}  // namespace

uint32_t encode_cpuid_signature(uint32_t family, uint32_t model, uint32_t stepping) {
  const uint32_t base_family = std::min<uint32_t>(family, 0xF);
  const uint32_t ext_family = family >= 0xF ? family - 0xF : 0;
  const bool ext_model_used = family == 0x6 || family >= 0xF;
  const uint32_t base_model = model & 0xF;
  const uint32_t ext_model = ext_model_used ? (model >> 4) & 0xF : 0;
  return (stepping & 0xF) | (base_model << 4) | (base_family << 8) | (ext_model << 16) |
         ((ext_family & 0xFF) << 20);
}

const CpuidEntry* find_cpuid_entry(std::span<const CpuidEntry> table, uint32_t function,
                                   uint32_t index) {
  for (const CpuidEntry& e : table)
    if (e.function == function && (!(e.flags & kCpuidFlagSignificantIndex) || e.index == index))
      return &e;
  return nullptr;
}

std::vector<CpuidEntry> build_guest_cpuid(std::span<const CpuidEntry> host,
                                          const CpuProfile& profile, uint32_t pv_features) {
  // The host's hypervisor range (KVM's own "KVMKVMKVM" leaves) gives way to pmuvm's.
  std::vector<CpuidEntry> t;
  for (const CpuidEntry& e : host)
    if (e.function < kPvCpuidBase || e.function > 0x4FFFFFFF) t.push_back(e);

  CpuidEntry& leaf0 = entry(t, kBasicMax);
  leaf0.eax = std::max<uint32_t>(leaf0.eax, kSignature);
  set_vendor(leaf0, profile.vendor);

  CpuidEntry& leaf1 = entry(t, kSignature);
  // Keep EAX bits 31:28 (reserved) and 13:12 (processor type 0 = original OEM) clear.
  leaf1.eax = encode_cpuid_signature(profile.family, profile.model, profile.stepping);

  // The extended range must reach the brand string and, with LWP, the LWP leaf.
  uint32_t ext_max = std::max(entry(t, kExtendedMax).eax, kBrandLast);
  if (profile.lwp.available) ext_max = std::max(ext_max, lwp::kCpuidLwpLeaf);
  CpuidEntry& ext0 = entry(t, kExtendedMax);
  ext0.eax = ext_max;
  set_vendor(ext0, profile.vendor);

  CpuidEntry& ext1 = entry(t, lwp::kCpuidExtFeaturesLeaf);
  const uint32_t lwp_bit = 1u << lwp::kCpuidLwpPresentEcxBit;
  ext1.ecx = profile.lwp.available ? (ext1.ecx | lwp_bit) : (ext1.ecx & ~lwp_bit);

  for (uint32_t f = kBrandFirst; f <= kBrandLast; ++f) {
    CpuidEntry& b = entry(t, f);
    const size_t base = (f - kBrandFirst) * 16;
    b.eax = chars4(profile.brand, base);
    b.ebx = chars4(profile.brand, base + 4);
    b.ecx = chars4(profile.brand, base + 8);
    b.edx = chars4(profile.brand, base + 12);
  }

  if (profile.lwp.available || ext_max >= lwp::kCpuidLwpLeaf) {
    // EAX comes from the enable policy, not from LWPMSR0 at run time (DESIGN §3).
    const lwp::CpuidLeaf l = lwp::cpuid_leaf(profile.lwp, profile.lwp_enable_policy);
    CpuidEntry& e = entry(t, lwp::kCpuidLwpLeaf);
    e.eax = l.eax;
    e.ebx = l.ebx;
    e.ecx = l.ecx;
    e.edx = l.edx;
  } else {
    std::erase_if(t, [](const CpuidEntry& e) { return e.function == lwp::kCpuidLwpLeaf; });
  }

  t.push_back(CpuidEntry{kPvCpuidBase, 0, 0, kPvCpuidFeatures, kPvSignatureEbx, kPvSignatureEcx,
                         kPvSignatureEdx});
  t.push_back(CpuidEntry{kPvCpuidFeatures, 0, 0, pv_features, profile.lwp_interrupt_vector, 0, 0});

  for (const CpuidOverride& ov : profile.cpuid_overrides) {
    uint32_t& r = reg(entry(t, ov.leaf, ov.subleaf), ov.reg);
    r = (r & ~ov.clear) | ov.set;
  }

  std::sort(t.begin(), t.end(), [](const CpuidEntry& a, const CpuidEntry& b) {
    return a.function != b.function ? a.function < b.function : a.index < b.index;
  });
  return t;
}

}  // namespace vmm
