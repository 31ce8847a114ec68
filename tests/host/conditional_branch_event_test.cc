// The raw host event that counts retired conditional branches
// (vmm/host/conditional_branch_event.h): one per core family, none (with the reason) where the
// cores differ or the model is unknown.
#include "vmm/host/conditional_branch_event.h"

#include <gtest/gtest.h>

namespace vmm {
namespace {

uint64_t EventOf(const std::string& vendor, uint32_t family, uint32_t model) {
  const Result<uint64_t> r = conditional_branch_event({vendor, family, model, false});
  if (auto* error = r.error_message()) {
    ADD_FAILURE() << *error;
    return 0;
  }
  return r.value();
}

std::string RefusalOf(const HostCpuIdentity& cpu) {
  const Result<uint64_t> r = conditional_branch_event(cpu);
  if (auto* error = r.error_message()) return *error;
  ADD_FAILURE() << "an event for " << cpu.vendor << " " << cpu.model;
  return "";
}

TEST(ConditionalBranchEvent, IntelBigCoresBeforeIceLakeCountC4Umask01) {
  for (uint32_t model : {0x1Au, 0x2Au, 0x3Cu, 0x3Du, 0x4Eu, 0x5Eu, 0x55u, 0x8Eu, 0x9Eu, 0xA5u})
    EXPECT_EQ(EventOf("GenuineIntel", 6, model), 0x01C4u) << std::hex << model;
}

TEST(ConditionalBranchEvent, IntelBigCoresFromIceLakeCountC4Umask11) {
  for (uint32_t model : {0x7Eu, 0x6Au, 0x8Cu, 0xA7u, 0x8Fu, 0xCFu, 0xAAu})
    EXPECT_EQ(EventOf("GenuineIntel", 6, model), 0x11C4u) << std::hex << model;
}

TEST(ConditionalBranchEvent, IntelAtomCoresCountJcc) {
  for (uint32_t model : {0x37u, 0x4Cu, 0x5Cu, 0x7Au, 0x86u})
    EXPECT_EQ(EventOf("GenuineIntel", 6, model), 0x7EC4u) << std::hex << model;
}

TEST(ConditionalBranchEvent, ZenCoresCountExRetCond) {
  EXPECT_EQ(EventOf("AuthenticAMD", 0x17, 0x31), 0xD1u);
  EXPECT_EQ(EventOf("AuthenticAMD", 0x19, 0x61), 0xD1u);
  EXPECT_EQ(EventOf("HygonGenuine", 0x18, 0x01), 0xD1u);
}

TEST(ConditionalBranchEvent, NoneWhereItIsNotKnownOrDiffersBetweenCores) {
  EXPECT_EQ(RefusalOf({"AuthenticAMD", 0x15, 0x30, false}),
            "no conditional-branch event is known for AuthenticAMD family 0x15 model 0x30");
  EXPECT_EQ(RefusalOf({"GenuineIntel", 6, 0x0F, false}),
            "no conditional-branch event is known for GenuineIntel family 0x6 model 0xf");
  EXPECT_EQ(RefusalOf({"GenuineIntel", 6, 0x97, true}),
            "a hybrid GenuineIntel family 0x6 model 0x97 counts conditional branches with "
            "different events on its two kinds of cores");
  EXPECT_EQ(RefusalOf({"CentaurHauls", 6, 0x0F, false}),
            "no conditional-branch event is known for CentaurHauls family 0x6 model 0xf");
}

TEST(ConditionalBranchEvent, ThisHostIsIdentified) {
  const HostCpuIdentity cpu = HostCpuIdentity::of_this_host();
  EXPECT_EQ(cpu.vendor.size(), 12u);
  EXPECT_GE(cpu.family, 5u);
}

}  // namespace
}  // namespace vmm
