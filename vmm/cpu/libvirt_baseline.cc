#include "vmm/cpu/libvirt_baseline.h"

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <optional>
#include <set>

#include "vmm/cpu/libvirt_cpu_xml.h"

namespace vmm {
namespace {

constexpr const char* kTestDriver = "test:///default";

// libvirt prints every error to stderr unless a handler is installed; we report its message
// ourselves, once, in our error line.
void quiet(void*, virErrorPtr) {}

std::string libvirt_message(const char* what) {
  const char* m = virGetLastErrorMessage();
  return std::string("libvirt ") + what + ": " + (m != nullptr ? m : "unknown error");
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

struct ConnectionCloser {
  void operator()(virConnectPtr c) const { virConnectClose(c); }
};

// libvirt's baseline XML for the members' host-CPU descriptions, or the reason there is none.
std::optional<std::string> ask_libvirt(const std::vector<std::string>& xmls, std::string& error) {
  virSetErrorFunc(nullptr, quiet);
  std::unique_ptr<virConnect, ConnectionCloser> conn(virConnectOpen(kTestDriver));
  if (!conn) {
    error = libvirt_message((std::string("cannot open ") + kTestDriver).c_str());
    return std::nullopt;
  }
  std::vector<const char*> args;
  for (const std::string& x : xmls) args.push_back(x.c_str());
  char* answer = virConnectBaselineCPU(conn.get(), args.data(), static_cast<unsigned>(args.size()),
                                       VIR_CONNECT_BASELINE_CPU_EXPAND_FEATURES);
  if (answer == nullptr) {
    error = libvirt_message("virConnectBaselineCPU");
    return std::nullopt;
  }
  std::string xml(answer);
  std::free(answer);  // libvirt's documented way to release the string
  return xml;
}

}  // namespace

LibvirtCrossCheck cross_check_with_libvirt(const std::vector<CpuProfile>& members,
                                           const CpuProfile& baseline) {
  LibvirtCrossCheck out;
  std::vector<std::string> xmls;
  std::set<std::string> unchecked;
  for (const CpuProfile& m : members) {
    HostCpuXml h = host_cpu_xml(m);
    if (!h.error.empty()) {
      out.error = h.error;
      return out;
    }
    xmls.push_back(std::move(h.xml));
    unchecked.insert(h.unchecked.begin(), h.unchecked.end());
  }
  out.unchecked.assign(unchecked.begin(), unchecked.end());
  const std::optional<std::string> answer = ask_libvirt(xmls, out.error);
  if (!answer) return out;

  const BaselineCpuXml theirs = parse_baseline_cpu_xml(*answer);
  out.model = theirs.model;
  std::set<std::string> libvirt_bits;
  for (const std::string& f : theirs.required) libvirt_bits.insert(our_feature_name(f));
  std::set<std::string> our_bits;
  for (const std::string& f : x86_feature_bits(baseline))
    if (!unchecked.count(f)) our_bits.insert(f);
  std::set_difference(our_bits.begin(), our_bits.end(), libvirt_bits.begin(), libvirt_bits.end(),
                      std::back_inserter(out.only_ours));
  std::set_difference(libvirt_bits.begin(), libvirt_bits.end(), our_bits.begin(), our_bits.end(),
                      std::back_inserter(out.only_libvirt));
  if (out.only_ours.empty() && out.only_libvirt.empty()) {
    out.agreed = our_bits.size();
    return out;
  }
  out.error = "libvirt virConnectBaselineCPU disagrees with the baseline's x86 features:";
  if (!out.only_ours.empty()) out.error += " only ours: " + joined(out.only_ours) + ";";
  if (!out.only_libvirt.empty()) out.error += " only libvirt's: " + joined(out.only_libvirt) + ";";
  out.error.pop_back();
  return out;
}

}  // namespace vmm
