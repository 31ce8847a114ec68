// The guest's CPUID table, defined by a CpuProfile alone and filtered by what KVM supports
// (KVM_GET_SUPPORTED_CPUID). The host's own values never reach the guest: the same profile gives
// the same table on every host, except for features that host's KVM cannot offer, which are
// dropped and reported. The KVM layer converts the result to kvm_cpuid_entry2 and sets it once,
// before the first KVM_RUN (DESIGN §3: KVM_SET_CPUID2 cannot change it later), one copy per vCPU
// from cpuid_for_vcpu() (the initial APIC ID in leaf 1 EBX[31:24]).
//
// What the table holds (vmm/profiles/README.md, "What the guest sees", says the same for users):
//   0x0              EAX = max_basic_leaf, EBX/EDX/ECX = vendor
//   0x1              EAX = family/model/stepping (encode_cpuid_signature); EBX = CLFLUSH line size
//                    (cache.line_size / 8, with clfsh) | 1 logical processor << 16, APIC ID 0;
//                    ECX/EDX = the named features
//   0x2, 0x4         Intel only (within max_basic_leaf): cache descriptors and deterministic cache
//                    parameters derived from the `cache` section
//   0x7.0            the named leaf-7 features (EAX = 0: no further subleaves)
//   0xA              Intel only: the `architectural_pmu` section (version, counters and widths,
//                    all 7 architectural events), each clamped to KVM's vPMU leaf 0xA, events it
//                    lacks marked unavailable; dropped whole (reported) when KVM offers no vPMU
//   0x80000000       EAX = max_extended_leaf; EBX/EDX/ECX = vendor (zero for GenuineIntel, as
//                    Intel's processors return)
//   0x80000001       ECX/EDX = the named features, ECX[15] = LWP from the `lwp` section; other
//                    vendors than Intel: EAX = the signature and EDX mirrors CPUID 1 EDX's
//                    bits 0-9, 12-17, 23, 24 (AMD APM)
//   0x80000002..4    brand string, NUL-padded to 48 bytes
//   0x80000005/6     L1D (non-Intel), L2 and L3 (non-Intel) from the `cache` section
//   0x80000007       the named features (invtsc)
//   0x80000008       EAX = address_sizes (physical bits clamped to KVM's, reported)
//   0x8000001C       pmu::lwp::cpuid_leaf(profile.lwp, profile.lwp_enable_policy), with LWP only
//   0x40000000..1    pmuvm's paravirtual leaves (below)
//   cpuid_overrides  applied last, in file order, unfiltered; an override of a missing leaf
//                    creates it
// Every other leaf is absent: zero within the max leaf, beyond it whatever KVM does for out-of-
// range leaves (the highest basic leaf for an Intel guest, zero for AMD), as on hardware.
// Entries come out sorted by (function, index).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "vmm/cpu/cpu_profile.h"

namespace vmm {

// Mirrors struct kvm_cpuid_entry2 without the padding, so nothing here needs a KVM header.
struct CpuidEntry {
  uint32_t function = 0;
  uint32_t index = 0;
  uint32_t flags = 0;  // kCpuidFlagSignificantIndex or 0
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  bool operator==(const CpuidEntry&) const = default;
};

// KVM_CPUID_FLAG_SIGNIFCANT_INDEX (sic, linux/kvm.h): the entry applies only to its `index`.
inline constexpr uint32_t kCpuidFlagSignificantIndex = 1;

// The paravirtual leaves (DESIGN §4.7). 0x40000000: EAX = highest PV leaf (0x40000001),
// EBX:ECX:EDX = the 12-byte signature "pmuvm\0\0\0\0\0\0\0", i.e.
//   EBX = 'p','m','u','v' = 0x76756d70, ECX = 'm',0,0,0 = 0x0000006d, EDX = 0.
// 0x40000001: EAX = the VMM's PV feature bits (the pv_features argument; their meaning is the
// VMM's), EBX = the LWP threshold-interrupt vector the guest kernel must program into
// LWPMSR0[47:40] (profile.lwp_interrupt_vector, 0 when the enable policy has no INT), ECX = EDX =
// 0.
inline constexpr uint32_t kPvCpuidBase = 0x40000000;
inline constexpr uint32_t kPvCpuidFeatures = 0x40000001;
inline constexpr uint32_t kPvSignatureEbx = 0x76756d70;  // "pmuv"
inline constexpr uint32_t kPvSignatureEcx = 0x0000006d;  // "m\0\0\0"
inline constexpr uint32_t kPvSignatureEdx = 0x00000000;  // "\0\0\0\0"

// A guest table and what filtering removed from the profile's definition.
struct GuestCpuid {
  std::vector<CpuidEntry> entries;
  // One item per loss, in profile order: a feature's name ("x2apic"), or an address size KVM
  // cannot present ("address_sizes.physical 48 -> 40"). Empty when KVM offers everything.
  std::vector<std::string> dropped;
};

// The guest's own PMU as its CPUID shows it (DESIGN §4.11): leaf 0xA's architectural PMU, or
// AMD's PerfCtrCore (0x80000001 ECX[23]); one line, or nullopt when the table shows none.
std::optional<std::string> describe_guest_pmu(std::span<const CpuidEntry> table);

// The profile's table filtered by `supported` (KVM_GET_SUPPORTED_CPUID): a named feature KVM does
// not offer is dropped, except those pmuvm provides itself (CpuidFeature::emulated_by_pmuvm).
GuestCpuid filter_guest_cpuid(std::span<const CpuidEntry> supported, const CpuProfile& profile,
                              uint32_t pv_features);

// The same, unfiltered: what the profile defines (shown by `pmuvm profiles NAME`).
std::vector<CpuidEntry> profile_cpuid(const CpuProfile& profile, uint32_t pv_features);

// filter_guest_cpuid() that logs the dropped items as one spdlog warning line.
std::vector<CpuidEntry> build_guest_cpuid(std::span<const CpuidEntry> supported,
                                          const CpuProfile& profile, uint32_t pv_features);

// vCPU `apic_id`'s copy of a guest table: the in-kernel LAPIC's initial APIC ID is the vCPU
// index and KVM does not patch CPUID to match, so leaf 1 EBX[31:24] and the x2APIC ID of leaves
// 0xB/0x1F (EDX; absent from the shipped profiles) are set here.
std::vector<CpuidEntry> cpuid_for_vcpu(std::span<const CpuidEntry> table, uint32_t apic_id);

// The entry CPUID(function, index) would use: an exact match for entries with a significant
// index, any entry of that function otherwise; nullptr when there is none (the guest reads zeros
// within the max leaf).
const CpuidEntry* find_cpuid_entry(std::span<const CpuidEntry> table, uint32_t function,
                                   uint32_t index = 0);

// CPUID 1 EAX for a displayed family/model/stepping: family >= 0xF puts 0xF in bits 11:8 and
// family - 0xF in the extended family (27:20); families 0x6 and >= 0xF put model bits 7:4 in the
// extended model (19:16). E.g. family 0x15 model 0x01 stepping 2 -> 0x00600F12.
// Snapshot / migration: the bits of `saw` (a guest's table) that `offered` (the table this host
// builds from the same profile) lacks, one line per register ("CPUID 0x1.0 ECX: bits 0x80200000
// missing"); empty when every register of `saw` is offered. Built from one profile, the tables
// differ only in what each host's KVM filtered out.
std::vector<std::string> cpuid_bits_missing(std::span<const CpuidEntry> saw,
                                            std::span<const CpuidEntry> offered);

uint32_t encode_cpuid_signature(uint32_t family, uint32_t model, uint32_t stepping);

}  // namespace vmm
