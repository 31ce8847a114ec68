// The guest's CPUID table: the host's supported CPUID (as KVM_GET_SUPPORTED_CPUID returns it),
// reshaped by a CpuProfile. The KVM layer converts the result to kvm_cpuid_entry2 and sets it
// once, before the first KVM_RUN (DESIGN §3: KVM_SET_CPUID2 cannot change it later).
//
// What build_guest_cpuid() changes, in this order:
//   leaf 0           EBX/EDX/ECX = vendor (EAX, the max basic leaf, stays the host's)
//   leaf 1           EAX = family/model/stepping (encode_cpuid_signature)
//   0x80000000       EAX = max(host, 0x80000004, 0x8000001C if LWP); EBX/EDX/ECX = vendor
//   0x80000001       ECX bit 15 (LWP present) = profile has LWP
//   0x80000002..4    brand string, NUL-padded to 48 bytes
//   0x8000001C       pmu::lwp::cpuid_leaf(profile.lwp, profile.lwp_enable_policy); all zero (or
//                    absent, when beyond the max extended leaf) without LWP
//   0x40000000..     the host's hypervisor leaves are replaced by pmuvm's (below)
//   cpuid_overrides  applied last, in file order; an override of a missing leaf creates it
// Everything else is the host's. Entries come out sorted by (function, index).
#pragma once

#include <cstdint>
#include <span>
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
// LWPMSR0[47:40] (profile.lwp_interrupt_vector, 0 when the enable policy has no INT), ECX = EDX = 0.
inline constexpr uint32_t kPvCpuidBase = 0x40000000;
inline constexpr uint32_t kPvCpuidFeatures = 0x40000001;
inline constexpr uint32_t kPvSignatureEbx = 0x76756d70;  // "pmuv"
inline constexpr uint32_t kPvSignatureEcx = 0x0000006d;  // "m\0\0\0"
inline constexpr uint32_t kPvSignatureEdx = 0x00000000;  // "\0\0\0\0"

std::vector<CpuidEntry> build_guest_cpuid(std::span<const CpuidEntry> host,
                                          const CpuProfile& profile, uint32_t pv_features);

// The entry CPUID(function, index) would use: an exact match for entries with a significant
// index, any entry of that function otherwise; nullptr when there is none (the guest reads zeros
// within the max leaf).
const CpuidEntry* find_cpuid_entry(std::span<const CpuidEntry> table, uint32_t function,
                                   uint32_t index = 0);

// CPUID 1 EAX for a displayed family/model/stepping: family >= 0xF puts 0xF in bits 11:8 and
// family - 0xF in the extended family (27:20); families 0x6 and >= 0xF put model bits 7:4 in the
// extended model (19:16). E.g. family 0x15 model 0x01 stepping 2 -> 0x00600F12.
uint32_t encode_cpuid_signature(uint32_t family, uint32_t model, uint32_t stepping);

}  // namespace vmm
