// CPU profiles in libvirt's CPU XML, and back: the pure half of the libvirt cross-check
// (libvirt_baseline.h calls libvirt).
//
// libvirt names x86 features after its cpu_map (/usr/share/libvirt/cpu_map/x86_features.xml,
// shipped by Debian's libvirt0), mostly as we do; where the names differ (sse4_1 is "sse4.1",
// sse3 is "pni", ...) the table in libvirt_cpu_xml.cc maps them, matched bit for bit against
// cpu_map's CPUID definitions by tests/cpu/libvirt_baseline_test.cc.
//
// Measured with libvirt 9.0's test:///default driver: virConnectBaselineCPU refuses a host CPU
// without <model> ("XML error: Missing CPU model name"), so a profile, which has no libvirt
// model, cannot be given as features alone. We give every member libvirt's smallest x86 model,
// "486" (fpu, pse, vme), plus all its features. libvirt then keeps "486" as the baseline's model
// (all inputs name it) and, with VIR_CONNECT_BASELINE_CPU_EXPAND_FEATURES, lists every feature
// the baseline requires, the model's included: that expanded list is what we compare. A profile
// lacking fpu, pse or vme cannot be described this way (a host <feature policy='disable'> is
// ignored by libvirt), and that is reported, never skipped.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "vmm/cpu/cpu_profile.h"

namespace vmm {

// libvirt's x86 model given to every member, and the features it implies.
inline constexpr std::string_view kLibvirtBaseModel = "486";
inline constexpr std::string_view kLibvirtBaseModelFeatures[] = {"fpu", "pse", "vme"};

// libvirt's name for one of our CPUID feature names (vmm/cpu/cpuid_features.h), or nullopt when
// cpu_map has no feature for that bit.
std::optional<std::string> libvirt_feature_name(std::string_view ours);
// Ours for a libvirt name; names we do not know are returned unchanged.
std::string our_feature_name(std::string_view libvirt);

// The x86 feature bits a profile shows the guest, by our names: `features` plus "lwp" (CPUID
// 0x80000001 ECX[15]) when it has LWP.
std::vector<std::string> x86_feature_bits(const CpuProfile& p);

struct HostCpuXml {
  std::string xml;                     // <cpu> for virConnectBaselineCPU, or "" with `error`
  std::vector<std::string> unchecked;  // our features cpu_map has no name for (left out)
  std::string error;
};
// A libvirt host-CPU description of `p`: arch x86_64, model kLibvirtBaseModel, the vendor
// (libvirt's "AMD", "Intel", "Hygon"; left out for other vendor strings) and a <feature> per bit.
HostCpuXml host_cpu_xml(const CpuProfile& p);

struct BaselineCpuXml {
  std::string model;                  // <model>, "" if none
  std::vector<std::string> required;  // <feature policy='require' name='...'/>, libvirt's names
};
// The parts of virConnectBaselineCPU's answer we compare. Not a general XML parser: it reads the
// <model> element and each <feature .../> element's policy and name attributes, which is all
// libvirt's <cpu> answer holds.
BaselineCpuXml parse_baseline_cpu_xml(std::string_view xml);

}  // namespace vmm
