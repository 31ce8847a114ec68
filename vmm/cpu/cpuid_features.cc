#include "vmm/cpu/cpuid_features.h"

namespace vmm {
namespace {

using R = CpuidRegister;

constexpr CpuidFeature F(std::string_view name, uint32_t leaf, R reg, uint8_t bit,
                         bool emulated = false) {
  return CpuidFeature{name, leaf, 0, reg, bit, emulated};
}

// A table, laid out by hand (tools/check_format.sh leaves it).
// clang-format off
constexpr CpuidFeature kFeatures[] = {
    // CPUID 1 EDX
    F("fpu", 1, R::kEdx, 0), F("vme", 1, R::kEdx, 1), F("de", 1, R::kEdx, 2),
    F("pse", 1, R::kEdx, 3), F("tsc", 1, R::kEdx, 4), F("msr", 1, R::kEdx, 5),
    F("pae", 1, R::kEdx, 6), F("mce", 1, R::kEdx, 7), F("cx8", 1, R::kEdx, 8),
    F("apic", 1, R::kEdx, 9), F("sep", 1, R::kEdx, 11), F("mtrr", 1, R::kEdx, 12),
    F("pge", 1, R::kEdx, 13), F("mca", 1, R::kEdx, 14), F("cmov", 1, R::kEdx, 15),
    F("pat", 1, R::kEdx, 16), F("pse36", 1, R::kEdx, 17), F("psn", 1, R::kEdx, 18),
    F("clfsh", 1, R::kEdx, 19), F("ds", 1, R::kEdx, 21), F("acpi", 1, R::kEdx, 22),
    F("mmx", 1, R::kEdx, 23), F("fxsr", 1, R::kEdx, 24), F("sse", 1, R::kEdx, 25),
    F("sse2", 1, R::kEdx, 26), F("ss", 1, R::kEdx, 27), F("htt", 1, R::kEdx, 28),
    F("tm", 1, R::kEdx, 29), F("pbe", 1, R::kEdx, 31),
    // CPUID 1 ECX
    F("sse3", 1, R::kEcx, 0), F("pclmulqdq", 1, R::kEcx, 1), F("dtes64", 1, R::kEcx, 2),
    F("monitor", 1, R::kEcx, 3), F("ds_cpl", 1, R::kEcx, 4), F("vmx", 1, R::kEcx, 5),
    F("smx", 1, R::kEcx, 6), F("est", 1, R::kEcx, 7), F("tm2", 1, R::kEcx, 8),
    F("ssse3", 1, R::kEcx, 9), F("cnxt_id", 1, R::kEcx, 10), F("sdbg", 1, R::kEcx, 11),
    F("fma", 1, R::kEcx, 12), F("cx16", 1, R::kEcx, 13), F("xtpr", 1, R::kEcx, 14),
    F("pdcm", 1, R::kEcx, 15), F("pcid", 1, R::kEcx, 17), F("dca", 1, R::kEcx, 18),
    F("sse4_1", 1, R::kEcx, 19), F("sse4_2", 1, R::kEcx, 20), F("x2apic", 1, R::kEcx, 21),
    F("movbe", 1, R::kEcx, 22), F("popcnt", 1, R::kEcx, 23),
    F("tsc_deadline", 1, R::kEcx, 24), F("aes", 1, R::kEcx, 25), F("xsave", 1, R::kEcx, 26),
    F("osxsave", 1, R::kEcx, 27), F("avx", 1, R::kEcx, 28), F("f16c", 1, R::kEcx, 29),
    F("rdrand", 1, R::kEcx, 30), F("hypervisor", 1, R::kEcx, 31, true),
    // CPUID 7.0 EBX
    F("fsgsbase", 7, R::kEbx, 0), F("tsc_adjust", 7, R::kEbx, 1), F("bmi1", 7, R::kEbx, 3),
    F("hle", 7, R::kEbx, 4), F("avx2", 7, R::kEbx, 5), F("smep", 7, R::kEbx, 7),
    F("bmi2", 7, R::kEbx, 8), F("erms", 7, R::kEbx, 9), F("invpcid", 7, R::kEbx, 10),
    F("rtm", 7, R::kEbx, 11), F("avx512f", 7, R::kEbx, 16), F("rdseed", 7, R::kEbx, 18),
    F("adx", 7, R::kEbx, 19), F("smap", 7, R::kEbx, 20), F("clflushopt", 7, R::kEbx, 23),
    F("clwb", 7, R::kEbx, 24), F("sha", 7, R::kEbx, 29),
    // CPUID 7.0 ECX, EDX
    F("umip", 7, R::kEcx, 2), F("pku", 7, R::kEcx, 3), F("rdpid", 7, R::kEcx, 22),
    F("md_clear", 7, R::kEdx, 10), F("spec_ctrl", 7, R::kEdx, 26), F("stibp", 7, R::kEdx, 27),
    F("arch_capabilities", 7, R::kEdx, 29), F("ssbd", 7, R::kEdx, 31),
    // CPUID 0x80000001 ECX
    F("lahf_lm", 0x80000001, R::kEcx, 0), F("cmp_legacy", 0x80000001, R::kEcx, 1),
    F("svm", 0x80000001, R::kEcx, 2), F("extapic", 0x80000001, R::kEcx, 3),
    F("cr8_legacy", 0x80000001, R::kEcx, 4), F("abm", 0x80000001, R::kEcx, 5),
    F("sse4a", 0x80000001, R::kEcx, 6), F("misalignsse", 0x80000001, R::kEcx, 7),
    F("3dnowprefetch", 0x80000001, R::kEcx, 8), F("osvw", 0x80000001, R::kEcx, 9),
    F("ibs", 0x80000001, R::kEcx, 10), F("xop", 0x80000001, R::kEcx, 11),
    F("skinit", 0x80000001, R::kEcx, 12), F("wdt", 0x80000001, R::kEcx, 13),
    F("lwp", 0x80000001, R::kEcx, 15, true), F("fma4", 0x80000001, R::kEcx, 16),
    F("tce", 0x80000001, R::kEcx, 17), F("nodeid_msr", 0x80000001, R::kEcx, 19),
    F("tbm", 0x80000001, R::kEcx, 21), F("topoext", 0x80000001, R::kEcx, 22),
    F("perfctr_core", 0x80000001, R::kEcx, 23), F("perfctr_nb", 0x80000001, R::kEcx, 24),
    // CPUID 0x80000001 EDX (AMD also mirrors CPUID 1 EDX bits here; the builder does that)
    F("syscall", 0x80000001, R::kEdx, 11), F("mp", 0x80000001, R::kEdx, 19),
    F("nx", 0x80000001, R::kEdx, 20), F("mmxext", 0x80000001, R::kEdx, 22),
    F("fxsr_opt", 0x80000001, R::kEdx, 25), F("pdpe1gb", 0x80000001, R::kEdx, 26),
    F("rdtscp", 0x80000001, R::kEdx, 27), F("lm", 0x80000001, R::kEdx, 29),
    F("3dnowext", 0x80000001, R::kEdx, 30), F("3dnow", 0x80000001, R::kEdx, 31),
    // CPUID 0x80000007 EDX
    F("invtsc", 0x80000007, R::kEdx, 8),
};
// clang-format on

}  // namespace

std::span<const CpuidFeature> cpuid_features() { return kFeatures; }

const CpuidFeature* find_cpuid_feature(std::string_view name) {
  for (const CpuidFeature& f : kFeatures)
    if (f.name == name) return &f;
  return nullptr;
}

}  // namespace vmm
