// The one place pmuvm includes <linux/kvm.h>. Include this header, never <linux/kvm.h> itself.
//
// Why: linux-libc-dev 6.1 (Debian 12) declares trailing flexible arrays with
// __DECLARE_FLEX_ARRAY, whose expansion wraps the array in an anonymous struct that starts with an
// empty struct. An empty struct has size 0 in C but 1 in C++, so in C++ sizeof(kvm_cpuid2) is 12
// instead of 8, and every ioctl number built from such a struct with _IOWR(…, sizeof) is wrong:
// KVM_GET_SUPPORTED_CPUID, KVM_SET_CPUID2, KVM_GET/SET_MSRS, KVM_GET_MSR_INDEX_LIST,
// KVM_GET/SET_XSAVE, KVM_SET_SIGNAL_MASK, KVM_SET_GSI_ROUTING… all fail with EINVAL. Redefining
// the macro as a plain zero-length array (a GNU extension both g++ and clang accept) gives the C
// layout. The static_asserts pin the C sizes, so a header change cannot silently break us again.
#pragma once

#include <linux/stddef.h>

#undef __DECLARE_FLEX_ARRAY
#define __DECLARE_FLEX_ARRAY(TYPE, NAME) TYPE NAME[0]

#include <linux/kvm.h>

#include <cstddef>

// Sizes and offsets as the kernel's C compiler sees them (x86-64).
static_assert(sizeof(kvm_cpuid2) == 8 && offsetof(kvm_cpuid2, entries) == 8);
static_assert(sizeof(kvm_cpuid) == 8 && offsetof(kvm_cpuid, entries) == 8);
static_assert(sizeof(kvm_msrs) == 8 && offsetof(kvm_msrs, entries) == 8);
static_assert(sizeof(kvm_msr_list) == 4 && offsetof(kvm_msr_list, indices) == 4);
static_assert(sizeof(kvm_signal_mask) == 4 && offsetof(kvm_signal_mask, sigset) == 4);
static_assert(sizeof(kvm_irq_routing) == 8 && offsetof(kvm_irq_routing, entries) == 8);
static_assert(sizeof(kvm_xsave) == 4096);
static_assert(sizeof(kvm_reg_list) == 8);
static_assert(sizeof(kvm_coalesced_mmio_ring) == 8);
static_assert(sizeof(kvm_cpuid_entry2) == 40);
static_assert(sizeof(kvm_msr_entry) == 16);
// The ioctl numbers that carry those sizes (values from the kernel's own build).
static_assert(KVM_GET_SUPPORTED_CPUID == 0xC008AE05);
static_assert(KVM_SET_CPUID2 == 0x4008AE90);
static_assert(KVM_GET_MSRS == 0xC008AE88);
static_assert(KVM_SET_MSRS == 0x4008AE89);
static_assert(KVM_GET_MSR_INDEX_LIST == 0xC004AE02);
