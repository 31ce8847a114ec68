#include "vmm/cpu/libvirt_baseline.h"

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <optional>
#include <set>
#include <type_traits>

#include "vmm/cpu/libvirt_cpu_xml.h"
#include "vmm/dynamic_library.h"

namespace vmm {
namespace {

constexpr const char* kTestDriver = "test:///default";
constexpr const char* kLibrary = "libvirt.so.0";

// libvirt, loaded when a baseline is asked for and not before: it pulls in ~57 shared libraries
// (ICU, krb5, gnutls, curl, glib, ...) that no VM start needs: pmuvm starts without it.
struct Libvirt {
  decltype(&virConnectOpen) open = nullptr;
  decltype(&virConnectClose) close = nullptr;
  decltype(&virConnectBaselineCPU) baseline_cpu = nullptr;
  decltype(&virGetLastErrorMessage) last_error = nullptr;
  decltype(&virSetErrorFunc) set_error_func = nullptr;
};

// The loaded library, or why it cannot be had.
const Libvirt* load_libvirt(std::string& error) {
  static Libvirt lib;
  static std::string why;
  static const bool loaded = [] {
    DynamicLibrary so(kLibrary);
    so.resolve(lib.open, "virConnectOpen");
    so.resolve(lib.close, "virConnectClose");
    so.resolve(lib.baseline_cpu, "virConnectBaselineCPU");
    so.resolve(lib.last_error, "virGetLastErrorMessage");
    so.resolve(lib.set_error_func, "virSetErrorFunc");
    if (!so.loaded())
      why = "libvirt cannot be loaded (" + so.why() +
            "): install Debian's libvirt0 package for --baseline's cross-check";
    else
      why = so.why();
    return why.empty();
  }();
  if (!loaded) error = why;
  return loaded ? &lib : nullptr;
}

// libvirt prints every error to stderr unless a handler is installed; we report its message
// ourselves, once, in our error line.
void quiet(void*, virErrorPtr) {}

std::string libvirt_message(const Libvirt& lib, const char* what) {
  const char* m = lib.last_error();
  return std::string("libvirt ") + what + ": " + (m != nullptr ? m : "unknown error");
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

// libvirt's baseline XML for the members' host-CPU descriptions, or the reason there is none.
std::optional<std::string> ask_libvirt(const std::vector<std::string>& xmls, std::string& error) {
  const Libvirt* lib = load_libvirt(error);
  if (lib == nullptr) return std::nullopt;
  lib->set_error_func(nullptr, quiet);
  auto close = [lib](virConnectPtr c) { lib->close(c); };
  std::unique_ptr<virConnect, decltype(close)> conn(lib->open(kTestDriver), close);
  if (!conn) {
    error = libvirt_message(*lib, (std::string("cannot open ") + kTestDriver).c_str());
    return std::nullopt;
  }
  std::vector<const char*> args;
  for (const std::string& x : xmls) args.push_back(x.c_str());
  char* answer = lib->baseline_cpu(conn.get(), args.data(), static_cast<unsigned>(args.size()),
                                   VIR_CONNECT_BASELINE_CPU_EXPAND_FEATURES);
  if (answer == nullptr) {
    error = libvirt_message(*lib, "virConnectBaselineCPU");
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
