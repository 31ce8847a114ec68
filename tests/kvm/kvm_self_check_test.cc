// The hardware-virtualization rule of pmuvm's start-up check (vmm/kvm/kvm_self_check.h) on
// /proc/cpuinfo texts: svm or vmx in a flags line serves; a PVM host (kvm_pvm, neither flag) is
// named as such. (The guest-debug self-test runs against real KVM in tests/e2e:guest_boot_test.)
#include "vmm/kvm/kvm_self_check.h"

#include <gtest/gtest.h>

namespace vmm {
namespace {

TEST(KvmSelfCheckTest, HardwareVirtualizationIsSvmOrVmxInTheFlags) {
  EXPECT_EQ(missing_hardware_virtualization("processor\t: 0\nflags\t\t: fpu vme svm lm\n", false),
            std::nullopt);
  EXPECT_EQ(missing_hardware_virtualization("flags\t\t: fpu vmx ept\n", true), std::nullopt);
  EXPECT_EQ(missing_hardware_virtualization("flags\t\t: fpu hypervisor lm\n", false),
            "no hardware virtualization (no svm or vmx in /proc/cpuinfo)");
  EXPECT_EQ(missing_hardware_virtualization("flags\t\t: fpu hypervisor lm\n", true),
            "no hardware virtualization (no svm or vmx in /proc/cpuinfo; its KVM is PVM, kvm_pvm, "
            "where KVM's instruction breakpoints never fire)");
  // Only a flags line counts, and whole words only.
  EXPECT_NE(missing_hardware_virtualization("model name\t: svm vmx\nflags\t\t: fpu svmx\n", false),
            std::nullopt);
}

}  // namespace
}  // namespace vmm
