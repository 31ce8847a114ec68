// vmm/kvm/restorable_msrs.h: a snapshot sets only the MSRs this host's KVM lists for saving, less
// KVM's and Hyper-V's paravirtual ones; everything else in a (crafted) state is dropped, named.
#include "vmm/kvm/restorable_msrs.h"

#include <gtest/gtest.h>

namespace {

using vmm::MsrValue;

TEST(RestorableMsrs, OnlyListedNonParavirtualMsrsAreSet) {
  const std::vector<uint32_t> host_list = {0x10, 0x11, 0x174, 0xC0000082, 0x4B564D01, 0x40000001};
  const std::vector<MsrValue> saved = {
      {0x10, 1},        // TSC: listed
      {0xC0000082, 2},  // LSTAR: listed
      {0x11, 3},        // kvm-clock wall clock: listed by KVM, but paravirtual
      {0x4B564D01, 4},  // kvm-clock system time (new range): paravirtual
      {0x40000001, 5},  // Hyper-V hypercall: paravirtual
      {0xC0010015, 6},  // HWCR: not in this host's list
      {0x3A, 7},        // FEATURE_CONTROL: not in the list
  };
  const vmm::MsrSelection s = vmm::restorable_msrs(saved, host_list);
  ASSERT_EQ(s.restore.size(), 2u);
  EXPECT_EQ(s.restore[0].index, 0x10u);
  EXPECT_EQ(s.restore[0].value, 1u);
  EXPECT_EQ(s.restore[1].index, 0xC0000082u);
  EXPECT_EQ(s.dropped, (std::vector<uint32_t>{0x11, 0x4B564D01, 0x40000001, 0xC0010015, 0x3A}));
}

TEST(RestorableMsrs, ARepeatedIndexIsSetOnce) {
  const vmm::MsrSelection s = vmm::restorable_msrs({{0x10, 1}, {0x10, 2}}, {0x10});
  ASSERT_EQ(s.restore.size(), 1u);
  EXPECT_EQ(s.restore[0].value, 1u);
  EXPECT_EQ(s.dropped, (std::vector<uint32_t>{0x10}));
}

}  // namespace
