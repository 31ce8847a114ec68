#include "vmm/host/conditional_branch_event.h"

#include <cpuid.h>
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace vmm {
namespace {

// Intel family 6 big cores from Nehalem to Comet Lake: BR_INST_RETIRED.CONDITIONAL, C4H umask 01H.
constexpr std::array<uint32_t, 27> kIntelConditionalUmask01 = {
    0x1A, 0x1E, 0x1F, 0x2E,        // Nehalem
    0x25, 0x2C, 0x2F,              // Westmere
    0x2A, 0x2D, 0x3A, 0x3E,        // Sandy Bridge, Ivy Bridge
    0x3C, 0x3F, 0x45, 0x46,        // Haswell
    0x3D, 0x47, 0x4F, 0x56,        // Broadwell
    0x4E, 0x5E, 0x55,              // Skylake client and server (Cascade/Cooper Lake)
    0x8E, 0x9E, 0xA5, 0xA6, 0x66,  // Kaby/Coffee/Whiskey/Amber/Comet Lake, Cannon Lake
};
// Ice Lake and later big cores: BR_INST_RETIRED.COND, C4H umask 11H (taken and not taken).
constexpr std::array<uint32_t, 17> kIntelConditionalUmask11 = {
    0x6A, 0x6C, 0x7D, 0x7E, 0x9D,  // Ice Lake
    0x8C, 0x8D, 0xA7,              // Tiger Lake, Rocket Lake
    0x8F, 0xCF,                    // Sapphire Rapids, Emerald Rapids
    0x97, 0x9A, 0xB7, 0xBA, 0xBF,  // Alder Lake, Raptor Lake (P-cores only: see hybrid)
    0xAA, 0xAC,                    // Meteor Lake
};
// Atom cores (Silvermont, Airmont, Goldmont, Goldmont Plus, Tremont): BR_INST_RETIRED.JCC,
// C4H umask 7EH.
constexpr std::array<uint32_t, 11> kIntelAtomJcc = {
    0x37, 0x4A, 0x4D, 0x5A, 0x5D, 0x4C,  // Silvermont, Airmont
    0x5C, 0x5F, 0x7A,                    // Goldmont, Goldmont Plus
    0x86, 0x96,                          // Tremont
};

template <size_t N>
bool listed(const std::array<uint32_t, N>& models, uint32_t model) {
  return std::find(models.begin(), models.end(), model) != models.end();
}

}  // namespace

HostCpuIdentity HostCpuIdentity::of_this_host() {
  HostCpuIdentity cpu;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return cpu;
  const unsigned max_leaf = a;
  char vendor[12];
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  cpu.vendor.assign(vendor, sizeof vendor);
  __get_cpuid(1, &a, &b, &c, &d);
  const uint32_t base_family = (a >> 8) & 0xF;
  cpu.family = base_family + (base_family == 0xF ? (a >> 20) & 0xFF : 0);
  cpu.model =
      ((a >> 4) & 0xF) | (base_family == 0x6 || base_family == 0xF ? ((a >> 16) & 0xF) << 4 : 0);
  if (max_leaf >= 7) {
    __get_cpuid_count(7, 0, &a, &b, &c, &d);
    cpu.hybrid = (d >> 15) & 1;
  }
  return cpu;
}

Result<uint64_t> conditional_branch_event(const HostCpuIdentity& cpu) {
  const std::string which =
      fmt::format("{} family {:#x} model {:#x}", cpu.vendor, cpu.family, cpu.model);
  if (cpu.vendor == "GenuineIntel") {
    if (cpu.hybrid)
      return Error::vmm("a hybrid " + which +
                        " counts conditional branches with different events on its two kinds "
                        "of cores");
    if (cpu.family == 6 && listed(kIntelConditionalUmask01, cpu.model)) return uint64_t{0x01C4};
    if (cpu.family == 6 && listed(kIntelConditionalUmask11, cpu.model)) return uint64_t{0x11C4};
    if (cpu.family == 6 && listed(kIntelAtomJcc, cpu.model)) return uint64_t{0x7EC4};
    return Error::vmm("no conditional-branch event is known for " + which);
  }
  // Zen and later (Hygon's Dhyana is a Zen): Ex_Ret_Cond, PMCx0D1.
  if ((cpu.vendor == "AuthenticAMD" || cpu.vendor == "HygonGenuine") && cpu.family >= 0x17)
    return uint64_t{0xD1};
  return Error::vmm("no conditional-branch event is known for " + which);
}

}  // namespace vmm
