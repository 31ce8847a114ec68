// The libvirt cross-check of a baseline's x86 feature bits (vmm/cpu/libvirt_baseline.h): our
// feature names against libvirt's cpu_map bit by bit, the host-CPU XML we build, the parse of
// libvirt's answer, and real virConnectBaselineCPU calls through the test:///default driver.
#include "vmm/cpu/libvirt_baseline.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>

#include "tests/cpu/builtin_profile.h"
#include "vmm/cpu/cpuid_features.h"
#include "vmm/cpu/libvirt_cpu_xml.h"
#include "vmm/cpu/profile_baseline.h"

namespace vmm {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using vmm::testing::Builtin;

constexpr const char* kCpuMap = "/usr/share/libvirt/cpu_map/";

CpuProfile Baseline(const std::vector<CpuProfile>& members) {
  Result<CpuProfile> r = compute_baseline(members);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? *r : CpuProfile{};
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path << " (Debian's libvirt0 ships cpu_map)";
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Attribute(const std::string& line, const std::string& name) {
  const size_t at = line.find(" " + name + "='");
  if (at == std::string::npos) return "";
  const size_t begin = at + name.size() + 3;
  return line.substr(begin, line.find('\'', begin) - begin);
}

// cpu_map's x86 features by (leaf, subleaf, register, bit), read line by line from
// x86_features.xml: `<feature name='sse4.1'>` then `<cpuid eax_in='0x01' ecx='0x00080000'/>`.
using Bit = std::tuple<uint32_t, uint32_t, CpuidRegister, int>;
std::map<Bit, std::string> LibvirtFeaturesByBit() {
  std::map<Bit, std::string> out;
  std::istringstream in(ReadFile(std::string(kCpuMap) + "x86_features.xml"));
  std::string line, feature;
  const std::pair<const char*, CpuidRegister> regs[] = {{"eax", CpuidRegister::kEax},
                                                        {"ebx", CpuidRegister::kEbx},
                                                        {"ecx", CpuidRegister::kEcx},
                                                        {"edx", CpuidRegister::kEdx}};
  while (std::getline(in, line)) {
    if (line.find("<feature name=") != std::string::npos) feature = Attribute(line, "name");
    if (line.find("<cpuid ") == std::string::npos) continue;
    const uint32_t leaf = std::stoul(Attribute(line, "eax_in"), nullptr, 16);
    const std::string sub = Attribute(line, "ecx_in");
    const uint32_t subleaf = sub.empty() ? 0 : std::stoul(sub, nullptr, 16);
    for (const auto& [name, reg] : regs) {
      const std::string mask = Attribute(line, name);
      if (mask.empty()) continue;
      const uint32_t m = std::stoul(mask, nullptr, 16);
      out[{leaf, subleaf, reg, __builtin_ctz(m)}] = feature;
    }
  }
  return out;
}

TEST(LibvirtNames, EveryFeatureMapsToCpuMapsFeatureForTheSameBit) {
  const std::map<Bit, std::string> libvirt = LibvirtFeaturesByBit();
  ASSERT_GT(libvirt.size(), 100u);
  for (const CpuidFeature& f : cpuid_features()) {
    SCOPED_TRACE(std::string(f.name));
    const auto it = libvirt.find({f.leaf, f.subleaf, f.reg, f.bit});
    const std::optional<std::string> want =
        it == libvirt.end() ? std::nullopt : std::optional<std::string>(it->second);
    EXPECT_EQ(libvirt_feature_name(f.name), want);
    if (want) {
      EXPECT_EQ(our_feature_name(*want), f.name);
    }
  }
  EXPECT_EQ(libvirt_feature_name("sse4_1"), "sse4.1");
  EXPECT_EQ(libvirt_feature_name("sdbg"), std::nullopt);
  EXPECT_EQ(our_feature_name("pni"), "sse3");
  EXPECT_EQ(our_feature_name("avx512vl"), "avx512vl");  // not ours: unchanged
}

TEST(LibvirtNames, TheBaseModelIsCpuMaps486) {
  const std::string xml = ReadFile(std::string(kCpuMap) + "x86_486.xml");
  std::vector<std::string> features;
  std::istringstream in(xml);
  for (std::string line; std::getline(in, line);)
    if (line.find("<feature name=") != std::string::npos)
      features.push_back(Attribute(line, "name"));
  std::vector<std::string> want(std::begin(kLibvirtBaseModelFeatures),
                                std::end(kLibvirtBaseModelFeatures));
  std::sort(features.begin(), features.end());
  EXPECT_EQ(features, want);
}

TEST(HostCpuXml, VendorModelAndEveryFeatureBit) {
  const HostCpuXml amd = host_cpu_xml(Builtin("amd-lwp"));
  ASSERT_EQ(amd.error, "");
  EXPECT_THAT(amd.xml, StartsWith("<cpu>\n  <arch>x86_64</arch>\n  <model>486</model>\n"
                                  "  <vendor>AMD</vendor>\n  <feature name='fpu'/>\n"));
  EXPECT_THAT(amd.xml, HasSubstr("  <feature name='sse4.1'/>\n  <feature name='sse4.2'/>\n"));
  EXPECT_THAT(amd.xml, HasSubstr("  <feature name='pni'/>\n"));
  EXPECT_THAT(amd.xml, HasSubstr("  <feature name='lm'/>\n  <feature name='lwp'/>\n</cpu>\n"));
  EXPECT_TRUE(amd.unchecked.empty());
  const HostCpuXml intel = host_cpu_xml(Builtin("intel-netburst"));
  EXPECT_THAT(intel.xml, HasSubstr("<vendor>Intel</vendor>"));
  EXPECT_THAT(intel.xml, ::testing::Not(HasSubstr("'lwp'")));
}

TEST(HostCpuXml, UnnamedFeaturesUnknownVendorsAndProfilesLibvirtCannotDescribe) {
  CpuProfile p = Builtin("amd-lwp-lite");
  p.features.push_back("sdbg");
  p.vendor = "pmuvmVirtCPU";
  const HostCpuXml h = host_cpu_xml(p);
  EXPECT_EQ(h.unchecked, (std::vector<std::string>{"sdbg"}));
  EXPECT_THAT(h.xml, ::testing::Not(HasSubstr("sdbg")));
  EXPECT_THAT(h.xml, ::testing::Not(HasSubstr("<vendor>")));
  p.features.erase(std::find(p.features.begin(), p.features.end(), "pse"));
  EXPECT_EQ(host_cpu_xml(p).error,
            "libvirt cannot describe CPU profile amd-lwp-lite: it lacks pse, which libvirt's "
            "smallest x86 model (486) has, and virConnectBaselineCPU needs a model");
}

TEST(BaselineCpuXml, ModelAndRequiredFeaturesOnly) {
  // libvirt 9.0's answer for a baseline of qemu64 and 486 hosts, as measured.
  const BaselineCpuXml b = parse_baseline_cpu_xml(
      "<cpu mode='custom' match='exact'>\n"
      "  <model fallback='allow'>486</model>\n"
      "  <vendor>AMD</vendor>\n"
      "  <feature policy='require' name='fpu'/>\n"
      "  <feature name=\"sse4.1\" policy=\"require\"/>\n"
      "  <feature policy='disable' name='vme'/>\n"
      "</cpu>\n");
  EXPECT_EQ(b.model, "486");
  EXPECT_EQ(b.required, (std::vector<std::string>{"fpu", "sse4.1"}));
  EXPECT_TRUE(parse_baseline_cpu_xml("<cpu/>").required.empty());
}

// ---- real libvirt ---------------------------------------------------------------------------

TEST(LibvirtCrossCheck, AmdLwpAndLiteAgree) {
  const std::vector<CpuProfile> members = {Builtin("amd-lwp"), Builtin("amd-lwp-lite")};
  const LibvirtCrossCheck c = cross_check_with_libvirt(members, Baseline(members));
  EXPECT_TRUE(c.ok()) << c.error;
  EXPECT_EQ(c.model, "486");
  EXPECT_EQ(c.agreed, 45u);  // 44 features in both profiles, and lwp
  EXPECT_TRUE(c.unchecked.empty());
}

TEST(LibvirtCrossCheck, ADifferenceIsNamed) {
  const std::vector<CpuProfile> members = {Builtin("amd-lwp"), Builtin("amd-lwp-lite")};
  CpuProfile wrong = Baseline(members);
  wrong.features.erase(std::find(wrong.features.begin(), wrong.features.end(), "sse4_2"));
  wrong.features.push_back("avx2");
  const LibvirtCrossCheck c = cross_check_with_libvirt(members, wrong);
  EXPECT_EQ(c.error,
            "libvirt virConnectBaselineCPU disagrees with the baseline's x86 features: "
            "only ours: avx2; only libvirt's: sse4_2");
  EXPECT_EQ(c.only_ours, (std::vector<std::string>{"avx2"}));
  EXPECT_EQ(c.only_libvirt, (std::vector<std::string>{"sse4_2"}));
}

TEST(LibvirtCrossCheck, LibvirtsOwnErrorsAreReported) {
  // libvirt refuses a migration set of two vendors; ours takes the first member's identity.
  const std::vector<CpuProfile> members = {Builtin("amd-lwp"), Builtin("intel-netburst")};
  const LibvirtCrossCheck c = cross_check_with_libvirt(members, Baseline(members));
  EXPECT_EQ(c.error, "libvirt virConnectBaselineCPU: operation failed: CPU vendors do not match");
}

// The measurement behind host_cpu_xml()'s model: without one libvirt gives no baseline at all.
TEST(LibvirtCrossCheck, LibvirtNeedsAModelForFeaturesAlone) {
  virSetErrorFunc(nullptr, [](void*, virErrorPtr) {});
  virConnectPtr conn = virConnectOpen("test:///default");
  ASSERT_NE(conn, nullptr) << virGetLastErrorMessage();
  const char* cpu =
      "<cpu><arch>x86_64</arch><vendor>AMD</vendor><feature name='fpu'/>"
      "<feature name='lwp'/></cpu>";
  const char* xmls[] = {cpu, cpu};
  char* answer = virConnectBaselineCPU(conn, xmls, 2, VIR_CONNECT_BASELINE_CPU_EXPAND_FEATURES);
  EXPECT_EQ(answer, nullptr) << answer;
  EXPECT_STREQ(virGetLastErrorMessage(), "XML error: Missing CPU model name");
  std::free(answer);
  virConnectClose(conn);
}

}  // namespace
}  // namespace vmm
