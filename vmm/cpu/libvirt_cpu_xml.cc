#include "vmm/cpu/libvirt_cpu_xml.h"

#include <algorithm>
#include <utility>

namespace vmm {
namespace {

// Our name -> cpu_map's, where they differ (found by CPUID bit in x86_features.xml, libvirt
// 9.0). cpu_map lists some of ours as aliases "for qemu", but libvirt's CPU XML accepts only
// the canonical names ("Unknown CPU feature sse4_1").
constexpr std::pair<std::string_view, std::string_view> kRenamed[] = {
    {"psn", "pn"},
    {"clfsh", "clflush"},
    {"htt", "ht"},
    {"sse3", "pni"},
    {"pclmulqdq", "pclmuldq"},
    {"cnxt_id", "cid"},
    {"sse4_1", "sse4.1"},
    {"sse4_2", "sse4.2"},
    {"tsc_deadline", "tsc-deadline"},
    {"sha", "sha-ni"},
    {"md_clear", "md-clear"},
    {"spec_ctrl", "spec-ctrl"},
    {"arch_capabilities", "arch-capabilities"},
    {"cr8_legacy", "cr8legacy"},
};

// Ours that cpu_map has no feature for: CPUID 1 ECX[11] and 0x80000001 EDX[19].
constexpr std::string_view kNotInLibvirt[] = {"sdbg", "mp"};

// libvirt's vendor names (cpu_map/x86_vendors.xml) for CPUID vendor strings.
constexpr std::pair<std::string_view, std::string_view> kVendors[] = {
    {"GenuineIntel", "Intel"},
    {"AuthenticAMD", "AMD"},
    {"HygonGenuine", "Hygon"},
};

// The value of attribute `name` inside one element's text (`<feature policy='x' name='y'/>`),
// quoted with ' or ".
std::string attribute(std::string_view element, std::string_view name) {
  for (size_t at = element.find(name); at != std::string_view::npos;
       at = element.find(name, at + 1)) {
    const size_t eq = at + name.size();
    const bool word_start =
        at > 0 && (element[at - 1] == ' ' || element[at - 1] == '\t' || element[at - 1] == '\n');
    if (!word_start || eq + 1 >= element.size() || element[eq] != '=') continue;
    const char quote = element[eq + 1];
    if (quote != '\'' && quote != '"') continue;
    const size_t end = element.find(quote, eq + 2);
    if (end == std::string_view::npos) return "";
    return std::string(element.substr(eq + 2, end - eq - 2));
  }
  return "";
}

}  // namespace

std::optional<std::string> libvirt_feature_name(std::string_view ours) {
  for (std::string_view n : kNotInLibvirt)
    if (n == ours) return std::nullopt;
  for (const auto& [from, to] : kRenamed)
    if (from == ours) return std::string(to);
  return std::string(ours);
}

std::string our_feature_name(std::string_view libvirt) {
  for (const auto& [from, to] : kRenamed)
    if (to == libvirt) return std::string(from);
  return std::string(libvirt);
}

std::vector<std::string> x86_feature_bits(const CpuProfile& p) {
  std::vector<std::string> bits = p.features;
  if (p.lwp.available) bits.push_back("lwp");
  return bits;
}

HostCpuXml host_cpu_xml(const CpuProfile& p) {
  HostCpuXml out;
  const std::vector<std::string> bits = x86_feature_bits(p);
  std::string missing;
  for (std::string_view f : kLibvirtBaseModelFeatures)
    if (std::find(bits.begin(), bits.end(), f) == bits.end())
      missing += (missing.empty() ? "" : ", ") + std::string(f);
  if (!missing.empty()) {
    out.error = "libvirt cannot describe CPU profile " + p.name + ": it lacks " + missing +
                ", which libvirt's smallest x86 model (" + std::string(kLibvirtBaseModel) +
                ") has, and virConnectBaselineCPU needs a model";
    return out;
  }
  std::string& x = out.xml;
  x = "<cpu>\n  <arch>x86_64</arch>\n  <model>" + std::string(kLibvirtBaseModel) + "</model>\n";
  for (const auto& [cpuid, name] : kVendors)
    if (cpuid == p.vendor) x += "  <vendor>" + std::string(name) + "</vendor>\n";
  for (const std::string& f : bits) {
    const std::optional<std::string> name = libvirt_feature_name(f);
    if (name)
      x += "  <feature name='" + *name + "'/>\n";
    else
      out.unchecked.push_back(f);
  }
  x += "</cpu>\n";
  return out;
}

BaselineCpuXml parse_baseline_cpu_xml(std::string_view xml) {
  BaselineCpuXml out;
  if (const size_t open = xml.find("<model"); open != std::string_view::npos) {
    const size_t text = xml.find('>', open);
    const size_t close = xml.find("</model>", open);
    if (text != std::string_view::npos && close != std::string_view::npos && text < close)
      out.model = std::string(xml.substr(text + 1, close - text - 1));
  }
  for (size_t at = xml.find("<feature"); at != std::string_view::npos;
       at = xml.find("<feature", at + 1)) {
    const size_t end = xml.find('>', at);
    if (end == std::string_view::npos) break;
    const char after = xml[at + 8];  // "<feature" is 8 bytes; not "<features>" and the like
    if (after != ' ' && after != '\t' && after != '\n' && after != '/') continue;
    const std::string_view element = xml.substr(at, end - at + 1);
    if (attribute(element, "policy") == "require")
      out.required.push_back(attribute(element, "name"));
  }
  return out;
}

}  // namespace vmm
