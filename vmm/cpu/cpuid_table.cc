#include "vmm/cpu/cpuid_table.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include <spdlog/spdlog.h>

#include "pmu/lwp/architecture.h"
#include "pmu/lwp/capabilities.h"
#include "vmm/cpu/cpuid_features.h"

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

// The entry for (function, index), created (flags 0) if the table has none. The reference is
// valid until the table grows again.
CpuidEntry& entry(std::vector<CpuidEntry>& table, uint32_t function, uint32_t index = 0) {
  for (CpuidEntry& e : table)
    if (e.function == function && (!(e.flags & kCpuidFlagSignificantIndex) || e.index == index))
      return e;
  // A new subleaf (an override's) of a leaf the table indexes (0x4, 0x7) must be indexed too, or
  // it would shadow every other subleaf.
  const bool indexed = std::any_of(table.begin(), table.end(), [&](const CpuidEntry& e) {
    return e.function == function && (e.flags & kCpuidFlagSignificantIndex);
  });
  table.push_back(
      CpuidEntry{function, index, indexed ? kCpuidFlagSignificantIndex : 0, 0, 0, 0, 0});
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

namespace {

// The registers the named features fill, before they are placed into their leaves.
struct FeatureWords {
  struct Word {
    uint32_t leaf, subleaf;
    CpuidRegister reg;
    uint32_t bits;
  };
  std::vector<Word> words;
  uint32_t& at(uint32_t leaf, uint32_t subleaf, CpuidRegister r) {
    for (Word& w : words)
      if (w.leaf == leaf && w.subleaf == subleaf && w.reg == r) return w.bits;
    words.push_back(Word{leaf, subleaf, r, 0});
    return words.back().bits;
  }
  uint32_t get(uint32_t leaf, CpuidRegister r) { return at(leaf, 0, r); }
};

bool is_intel(const CpuProfile& p) { return p.vendor == "GenuineIntel"; }

// CPUID 1 EDX bits AMD repeats in 0x80000001 EDX: FPU..APIC (0-9), MTRR..PSE36 (12-17), MMX,
// FXSR (23, 24).
constexpr uint32_t kAmdMirroredEdx = 0x000003FFu | 0x0003F000u | (1u << 23) | (1u << 24);

// Intel CPUID 2 descriptors for the cache levels a profile may describe (SDM vol. 2A, table
// 3-12), all with 64-byte lines.
struct Descriptor {
  uint8_t code;
  int level;
  uint32_t size_kib, ways;
};
constexpr Descriptor kDescriptors[] = {
    {0x66, 1, 8, 4},     {0x60, 1, 16, 8},    {0x67, 1, 16, 4},  {0x2C, 1, 32, 8},
    {0x68, 1, 32, 4},    {0x7A, 2, 256, 8},   {0x7B, 2, 512, 8}, {0x7C, 2, 1024, 8},
    {0x7D, 2, 2048, 8},  {0x7F, 2, 512, 2},   {0x86, 2, 512, 4}, {0x78, 2, 1024, 4},
    {0x48, 2, 3072, 12}, {0x4E, 2, 6144, 24}, {0x22, 3, 512, 4}, {0x23, 3, 1024, 8},
    {0x25, 3, 2048, 8},  {0x29, 3, 4096, 8},
};

std::optional<uint8_t> descriptor(int level, const CacheLevel& c, uint32_t line_size) {
  if (line_size != 64) return std::nullopt;
  for (const Descriptor& d : kDescriptors)
    if (d.level == level && d.size_kib == c.size_kib && d.ways == c.ways) return d.code;
  return std::nullopt;
}

// CPUID 2: AL = 1 (one CPUID 2 call), then one descriptor per level, 0x40 when there is no L3;
// 0xFF ("see CPUID 4") when a level has no descriptor.
CpuidEntry leaf2(const CacheGeometry& cache) {
  std::vector<uint8_t> codes;
  const std::optional<uint8_t> l1 = descriptor(1, cache.l1d, cache.line_size);
  const std::optional<uint8_t> l2 = descriptor(2, cache.l2, cache.line_size);
  std::optional<uint8_t> l3 = 0x40;
  if (cache.l3) l3 = descriptor(3, *cache.l3, cache.line_size);
  if (l1 && l2 && l3)
    codes = {*l1, *l2, *l3};
  else
    codes = {0xFF};
  uint8_t bytes[16] = {0x01};
  for (size_t i = 0; i < codes.size(); ++i) bytes[1 + i] = codes[i];
  CpuidEntry e{0x2, 0, 0, 0, 0, 0, 0};
  std::memcpy(&e.eax, bytes, 4);
  std::memcpy(&e.ebx, bytes + 4, 4);
  std::memcpy(&e.ecx, bytes + 8, 4);
  std::memcpy(&e.edx, bytes + 12, 4);
  return e;
}

// CPUID 4 subleaf for one cache: type 1 data / 3 unified, self-initializing, one thread and one
// core share it; EBX = ways-1 (31:22), partitions-1 = 0, line-1; ECX = sets-1.
CpuidEntry leaf4(uint32_t index, uint32_t type, uint32_t level, const CacheLevel& c,
                 uint32_t line_size) {
  const uint32_t sets = c.size_kib * 1024 / (line_size * c.ways);
  return CpuidEntry{0x4,
                    index,
                    kCpuidFlagSignificantIndex,
                    type | (level << 5) | (1u << 8),
                    ((c.ways - 1) << 22) | (line_size - 1),
                    sets - 1,
                    0};
}

// AMD's 4-bit associativity code of CPUID 0x80000006 (APM vol. 3, E.4.5); 0 when none fits.
uint32_t amd_ways_code(uint32_t ways) {
  switch (ways) {
    case 1: return 0x1;
    case 2: return 0x2;
    case 4: return 0x4;
    case 8: return 0x6;
    case 16: return 0x8;
    case 32: return 0xA;
    case 48: return 0xB;
    case 64: return 0xC;
    case 96: return 0xD;
    case 128: return 0xE;
  }
  return 0;
}

// CPUID 0xA (SDM vol. 3B, 20.2.1-20.2.3): EAX version, counters, width, length of the EBX
// event vector; EBX events not available (bit set); EDX fixed counters and their width.
constexpr uint32_t kArchitecturalPmuLeaf = 0xA;
constexpr uint32_t kArchitecturalEvents = 7;

struct ArchitecturalPmuFields {
  uint32_t version, counters, counter_bits, events, unavailable, fixed_counters, fixed_bits;
  static ArchitecturalPmuFields of(const CpuidEntry& e) {
    return {e.eax & 0xFF, (e.eax >> 8) & 0xFF, (e.eax >> 16) & 0xFF, e.eax >> 24,
            e.ebx,        e.edx & 0x1F,        (e.edx >> 5) & 0xFF};
  }
};

// The profile's architectural PMU as leaf 0xA, clamped to what KVM's vPMU offers (KVM's own leaf
// 0xA: the host PMU's counters, as KVM passes them on); nullopt when KVM offers none.
std::optional<CpuidEntry> architectural_pmu_leaf(const ArchitecturalPmu& profile,
                                                 std::span<const CpuidEntry> supported, bool filter,
                                                 std::vector<std::string>& dropped) {
  ArchitecturalPmu a = profile;
  uint32_t events = kArchitecturalEvents, unavailable = 0;
  if (filter) {
    const CpuidEntry* s = find_cpuid_entry(supported, kArchitecturalPmuLeaf);
    const ArchitecturalPmuFields kvm = ArchitecturalPmuFields::of(s ? *s : CpuidEntry{});
    if (kvm.version == 0 || kvm.counters == 0) {
      dropped.push_back(
          "architectural_pmu (KVM offers no vPMU: the host has no PMU, or "
          "kvm's enable_pmu is off)");
      return std::nullopt;
    }
    auto clamp = [&](const char* name, uint32_t& value, uint32_t offered) {
      if (offered >= value) return;
      dropped.push_back(std::string("architectural_pmu.") + name + " " + std::to_string(value) +
                        " -> " + std::to_string(offered));
      value = offered;
    };
    clamp("version", a.version, kvm.version);
    clamp("counters", a.counters, kvm.counters);
    clamp("counter_bits", a.counter_bits, kvm.counter_bits);
    if (a.version >= 2) {
      clamp("fixed_counters", a.fixed_counters, kvm.fixed_counters);
      if (a.fixed_counters > 0) clamp("fixed_counter_bits", a.fixed_counter_bits, kvm.fixed_bits);
    }
    events = std::min(events, kvm.events);
    unavailable = kvm.unavailable & ((1u << events) - 1);
  }
  const bool fixed = a.version >= 2 && a.fixed_counters > 0;
  return CpuidEntry{kArchitecturalPmuLeaf,
                    0,
                    0,
                    a.version | (a.counters << 8) | (a.counter_bits << 16) | (events << 24),
                    unavailable,
                    0,
                    fixed ? a.fixed_counters | (a.fixed_counter_bits << 5) : 0};
}

// The guest's table from a profile, one function per leaf (as Firecracker's normalize.rs), in
// the order a guest reads them; build() sorts it. `filter`: drop what KVM's `supported` table
// lacks (feature bits, address sizes, architectural PMU parts), noting each in `dropped`.
class CpuidBuilder {
 public:
  CpuidBuilder(const CpuProfile& profile, uint32_t pv_features,
               std::span<const CpuidEntry> supported, bool filter,
               std::vector<std::string>& dropped)
      : p_(profile),
        pv_features_(pv_features),
        supported_(supported),
        filter_(filter),
        dropped_(dropped),
        intel_(is_intel(profile)),
        signature_(encode_cpuid_signature(profile.family, profile.model, profile.stepping)) {}

  std::vector<CpuidEntry> build() {
    collect_features();
    // Each leaf is complete before the next one is added (entry() references do not survive
    // growth).
    basic_max();
    signature();
    cache_descriptors();
    deterministic_cache();
    structured_features();
    architectural_pmu();
    extended_max();
    extended_features();
    brand();
    l1_cache();
    l2_l3_cache();
    power_management();
    address_sizes();
    lightweight_profiling();
    paravirtual();
    overrides();
    std::sort(t_.begin(), t_.end(), [](const CpuidEntry& a, const CpuidEntry& b) {
      return a.function != b.function ? a.function < b.function : a.index < b.index;
    });
    return std::move(t_);
  }

 private:
  bool basic(uint32_t leaf) const { return leaf <= p_.max_basic_leaf; }
  // pmuvm's architectural PMU: its leaf 0xA and PDCM (IA32_PERF_CAPABILITIES, which the model
  // answers), and with PEBS DS and DTES64 (the DS area, which the model writes), are the
  // profile's, whatever KVM offers.
  bool modelled_pmu() const {
    return p_.architectural_pmu && p_.architectural_pmu->modelled_by_pmuvm;
  }
  bool modelled_feature(const std::string& name) const {
    if (!modelled_pmu()) return false;
    return name == "pdcm" || (p_.architectural_pmu->pebs && (name == "ds" || name == "dtes64"));
  }
  bool extended(uint32_t leaf) const { return leaf <= p_.max_extended_leaf; }

  // The profile's feature names as bits of their leaves (those KVM lacks dropped when filtering).
  void collect_features() {
    for (const std::string& name : p_.features) {
      const CpuidFeature* f = find_cpuid_feature(name);
      if (f == nullptr) continue;  // the parser accepts known names only
      const uint32_t bit = 1u << f->bit;
      if (filter_ && !f->emulated_by_pmuvm && !modelled_feature(name)) {
        const CpuidEntry* s = find_cpuid_entry(supported_, f->leaf, f->subleaf);
        CpuidEntry offered = s ? *s : CpuidEntry{};
        if (!(reg(offered, f->reg) & bit)) {
          dropped_.push_back(name);
          continue;
        }
      }
      w_.at(f->leaf, f->subleaf, f->reg) |= bit;
    }
    if (p_.lwp.available)
      w_.at(lwp::kCpuidExtFeaturesLeaf, 0, CpuidRegister::kEcx) |= 1u
                                                                   << lwp::kCpuidLwpPresentEcxBit;
  }

  void basic_max() {
    CpuidEntry leaf0{kBasicMax, 0, 0, p_.max_basic_leaf, 0, 0, 0};
    set_vendor(leaf0, p_.vendor);
    t_.push_back(leaf0);
  }

  // EAX bits 31:28 (reserved) and 13:12 (processor type 0 = original OEM) stay clear.
  void signature() {
    const uint32_t edx = w_.get(1, CpuidRegister::kEdx);
    const bool clflush = edx & (1u << 19);
    t_.push_back(CpuidEntry{kSignature, 0, 0, signature_,
                            (clflush ? (p_.cache.line_size / 8) << 8 : 0) | (1u << 16),
                            w_.get(1, CpuidRegister::kEcx), edx});
  }

  void cache_descriptors() {
    if (intel_ && basic(0x2)) t_.push_back(leaf2(p_.cache));
  }

  void deterministic_cache() {
    if (!intel_ || !basic(0x4)) return;
    const CacheGeometry& cache = p_.cache;
    uint32_t i = 0;
    t_.push_back(leaf4(i++, 1, 1, cache.l1d, cache.line_size));
    t_.push_back(leaf4(i++, 3, 2, cache.l2, cache.line_size));
    if (cache.l3) t_.push_back(leaf4(i++, 3, 3, *cache.l3, cache.line_size));
    t_.push_back(CpuidEntry{0x4, i, kCpuidFlagSignificantIndex, 0, 0, 0, 0});
  }

  void structured_features() {
    if (!basic(0x7)) return;
    t_.push_back(CpuidEntry{0x7, 0, kCpuidFlagSignificantIndex, 0, w_.get(7, CpuidRegister::kEbx),
                            w_.get(7, CpuidRegister::kEcx), w_.get(7, CpuidRegister::kEdx)});
  }

  void architectural_pmu() {
    if (!p_.architectural_pmu || !basic(kArchitecturalPmuLeaf)) return;
    if (const std::optional<CpuidEntry> pmu = architectural_pmu_leaf(
            *p_.architectural_pmu, supported_, filter_ && !modelled_pmu(), dropped_))
      t_.push_back(*pmu);
  }

  void extended_max() {
    CpuidEntry ext0{kExtendedMax, 0, 0, p_.max_extended_leaf, 0, 0, 0};
    if (!intel_) set_vendor(ext0, p_.vendor);
    t_.push_back(ext0);
  }

  void extended_features() {
    CpuidEntry ext1{lwp::kCpuidExtFeaturesLeaf,
                    0,
                    0,
                    0,
                    0,
                    w_.get(lwp::kCpuidExtFeaturesLeaf, CpuidRegister::kEcx),
                    w_.get(lwp::kCpuidExtFeaturesLeaf, CpuidRegister::kEdx)};
    if (!intel_) {
      ext1.eax = signature_;
      ext1.edx |= w_.get(1, CpuidRegister::kEdx) & kAmdMirroredEdx;
    }
    t_.push_back(ext1);
  }

  void brand() {
    for (uint32_t f = kBrandFirst; f <= kBrandLast; ++f) {
      CpuidEntry& b = entry(t_, f);
      const size_t base = (f - kBrandFirst) * 16;
      b.eax = chars4(p_.brand, base);
      b.ebx = chars4(p_.brand, base + 4);
      b.ecx = chars4(p_.brand, base + 8);
      b.edx = chars4(p_.brand, base + 12);
    }
  }

  // Cache leaves: size, associativity, lines per tag 1, line size (APM vol. 3, E.4.4-5); a level
  // too large for its field (L1D > 255 KiB, L2 > 65535 KiB, L3 not in 512 KiB units) reads 0.
  // L1I (EDX): profiles model no instruction cache, so it reads as the L1D does; it must not read
  // 0, since OS code divides by its associativity (Linux's bsp_init_amd on family 0x15).
  void l1_cache() {
    const CacheGeometry& cache = p_.cache;
    if (intel_ || !extended(0x80000005) || cache.l1d.size_kib > 0xFF) return;
    CpuidEntry& e = entry(t_, 0x80000005);
    e.ecx = (cache.l1d.size_kib << 24) | (std::min(cache.l1d.ways, 0xFFu) << 16) | (1u << 8) |
            cache.line_size;
    e.edx = e.ecx;
  }

  void l2_l3_cache() {
    if (!extended(0x80000006)) return;
    const CacheGeometry& cache = p_.cache;
    CpuidEntry& e = entry(t_, 0x80000006);
    if (cache.l2.size_kib <= 0xFFFF)
      e.ecx = (cache.l2.size_kib << 16) | (amd_ways_code(cache.l2.ways) << 12) |
              (intel_ ? 0 : 1u << 8) | cache.line_size;
    if (!intel_ && cache.l3 && cache.l3->size_kib % 512 == 0 && cache.l3->size_kib / 512 <= 0x3FFF)
      e.edx = ((cache.l3->size_kib / 512) << 18) | (amd_ways_code(cache.l3->ways) << 12) |
              (1u << 8) | cache.line_size;
  }

  void power_management() {
    if (!extended(0x80000007)) return;
    const uint32_t edx = w_.get(0x80000007, CpuidRegister::kEdx);
    if (edx != 0) entry(t_, 0x80000007).edx = edx;
  }

  void address_sizes() {
    if (!extended(0x80000008) || !p_.address_sizes) return;
    AddressSizes a = *p_.address_sizes;
    const CpuidEntry* s = filter_ ? find_cpuid_entry(supported_, 0x80000008) : nullptr;
    if (s != nullptr) {
      const uint32_t kvm_physical = s->eax & 0xFF, kvm_linear = (s->eax >> 8) & 0xFF;
      if (kvm_physical != 0 && kvm_physical < a.physical) {
        dropped_.push_back("address_sizes.physical " + std::to_string(a.physical) + " -> " +
                           std::to_string(kvm_physical));
        a.physical = kvm_physical;
      }
      if (kvm_linear != 0 && kvm_linear < a.linear) {
        dropped_.push_back("address_sizes.linear " + std::to_string(a.linear) + " -> " +
                           std::to_string(kvm_linear));
        a.linear = kvm_linear;
      }
    }
    entry(t_, 0x80000008).eax = a.physical | (a.linear << 8);
  }

  // EAX comes from the enable policy, not from LWPMSR0 at run time (DESIGN §3).
  void lightweight_profiling() {
    if (!p_.lwp.available || !extended(lwp::kCpuidLwpLeaf)) return;
    const lwp::CpuidLeaf l = lwp::cpuid_leaf(p_.lwp, p_.lwp_enable_policy);
    t_.push_back(CpuidEntry{lwp::kCpuidLwpLeaf, 0, 0, l.eax, l.ebx, l.ecx, l.edx});
  }

  void paravirtual() {
    t_.push_back(CpuidEntry{kPvCpuidBase, 0, 0, kPvCpuidFeatures, kPvSignatureEbx, kPvSignatureEcx,
                            kPvSignatureEdx});
    t_.push_back(CpuidEntry{kPvCpuidFeatures, 0, 0, pv_features_, p_.lwp_interrupt_vector, 0, 0});
  }

  // Last: the profile's own bits win over everything above.
  void overrides() {
    for (const CpuidOverride& ov : p_.cpuid_overrides) {
      uint32_t& r = reg(entry(t_, ov.leaf, ov.subleaf), ov.reg);
      r = (r & ~ov.clear) | ov.set;
    }
  }

  const CpuProfile& p_;
  const uint32_t pv_features_;
  const std::span<const CpuidEntry> supported_;
  const bool filter_;
  std::vector<std::string>& dropped_;
  const bool intel_;
  const uint32_t signature_;
  FeatureWords w_;
  std::vector<CpuidEntry> t_;
};

std::vector<CpuidEntry> build(const CpuProfile& profile, uint32_t pv_features,
                              std::span<const CpuidEntry> supported, bool filter,
                              std::vector<std::string>& dropped) {
  return CpuidBuilder(profile, pv_features, supported, filter, dropped).build();
}

}  // namespace

std::vector<CpuidEntry> cpuid_for_vcpu(std::span<const CpuidEntry> table, uint32_t apic_id) {
  std::vector<CpuidEntry> own(table.begin(), table.end());
  for (CpuidEntry& e : own) {
    if (e.function == kSignature) e.ebx = (e.ebx & 0x00FFFFFFu) | (apic_id << 24);
    if (e.function == 0xB || e.function == 0x1F) e.edx = apic_id;
  }
  return own;
}

GuestCpuid filter_guest_cpuid(std::span<const CpuidEntry> supported, const CpuProfile& profile,
                              uint32_t pv_features) {
  GuestCpuid g;
  g.entries = build(profile, pv_features, supported, true, g.dropped);
  return g;
}

std::vector<CpuidEntry> profile_cpuid(const CpuProfile& profile, uint32_t pv_features) {
  std::vector<std::string> dropped;
  return build(profile, pv_features, {}, false, dropped);
}

std::vector<CpuidEntry> build_guest_cpuid(std::span<const CpuidEntry> supported,
                                          const CpuProfile& profile, uint32_t pv_features) {
  GuestCpuid g = filter_guest_cpuid(supported, profile, pv_features);
  if (!g.dropped.empty()) {
    std::string list;
    for (const std::string& d : g.dropped) list += (list.empty() ? "" : ", ") + d;
    spdlog::warn("CPU profile {}: KVM on this host cannot offer, so the guest does not see: {}",
                 profile.name, list);
  }
  return std::move(g.entries);
}

namespace {

// Leaf 0xA as the guest saw it against what this host offers: each count and width at least the
// guest's, and every event the guest saw available still available.
void architectural_pmu_missing(const CpuidEntry& saw, const CpuidEntry& offered,
                               std::vector<std::string>& out) {
  const ArchitecturalPmuFields a = ArchitecturalPmuFields::of(saw);
  const ArchitecturalPmuFields b = ArchitecturalPmuFields::of(offered);
  auto at_least = [&](const char* what, uint32_t guest, uint32_t here) {
    if (here < guest)
      out.push_back("CPUID 0xa: architectural PMU " + std::string(what) + " " +
                    std::to_string(guest) + ", here " + std::to_string(here));
  };
  at_least("version", a.version, b.version);
  at_least("counters", a.counters, b.counters);
  at_least("counter width", a.counter_bits, b.counter_bits);
  at_least("event vector length", a.events, b.events);
  at_least("fixed counters", a.fixed_counters, b.fixed_counters);
  at_least("fixed counter width", a.fixed_bits, b.fixed_bits);
  const uint32_t events = a.events >= 32 ? ~0u : (1u << a.events) - 1;
  if (const uint32_t lost = b.unavailable & ~a.unavailable & events)
    out.push_back("CPUID 0xa EBX: architectural events " + std::to_string(lost) +
                  " (bit mask) not available here");
}

}  // namespace

std::optional<std::string> describe_guest_pmu(std::span<const CpuidEntry> table) {
  if (const CpuidEntry* e = find_cpuid_entry(table, kArchitecturalPmuLeaf)) {
    const ArchitecturalPmuFields a = ArchitecturalPmuFields::of(*e);
    if (a.version != 0 && a.counters != 0)
      return "architectural (CPUID 0xA) version " + std::to_string(a.version) + ", " +
             std::to_string(a.counters) + " counters of " + std::to_string(a.counter_bits) +
             " bits, " + std::to_string(a.fixed_counters) + " fixed";
  }
  const CpuidEntry* ext = find_cpuid_entry(table, 0x80000001);
  if (ext && (ext->ecx & (1u << 23))) return "AMD PerfCtrCore (CPUID 0x80000001 ECX[23])";
  return std::nullopt;
}

std::vector<std::string> cpuid_bits_missing(std::span<const CpuidEntry> saw,
                                            std::span<const CpuidEntry> offered) {
  std::vector<std::string> out;
  for (const CpuidEntry& e : saw) {
    const CpuidEntry* o = find_cpuid_entry(offered, e.function, e.index);
    if (e.function == kArchitecturalPmuLeaf) {  // counts and widths, not feature bits
      architectural_pmu_missing(e, o ? *o : CpuidEntry{}, out);
      continue;
    }
    const uint32_t theirs[4] = {e.eax, e.ebx, e.ecx, e.edx};
    const uint32_t ours[4] = {o ? o->eax : 0, o ? o->ebx : 0, o ? o->ecx : 0, o ? o->edx : 0};
    static constexpr const char* kNames[4] = {"EAX", "EBX", "ECX", "EDX"};
    for (int r = 0; r < 4; ++r)
      if (const uint32_t lacking = theirs[r] & ~ours[r]) {
        char line[96];
        std::snprintf(line, sizeof line, "CPUID %#x.%u %s: bits %#x missing", e.function, e.index,
                      kNames[r], lacking);
        out.push_back(line);
      }
  }
  return out;
}

}  // namespace vmm
