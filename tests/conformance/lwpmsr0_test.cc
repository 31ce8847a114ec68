// Conformance: LWPMSR0 (proposal §5.2.1, Table 3; DESIGN §4.1) through LwpUnit::write_msr/read_msr.
#include <gtest/gtest.h>

#include "pmu/lwp/architecture.h"
#include "pmu/lwp/lwp_unit.h"
#include "tests/conformance/lwp_fixture.h"

namespace pmu::lwp::conformance {
namespace {

class Lwpmsr0Test : public LwpFixture {
 protected:
  void SetUp() override {
    LwpFixture::SetUp();
    MakeUnit();
  }
  uint64_t ReadMsr0() {
    uint64_t v = 0xDEAD;
    EXPECT_EQ(unit->read_msr(kMsrLwpFeatureEnable, 0, v), MsrResult::kOk);
    return v;
  }
};

// Table 3: every bit resets to 0; CPUID EAX reflects it.
TEST_F(Lwpmsr0Test, ResetValueIsZero) {
  EXPECT_EQ(unit->lwpmsr0(), 0u);
  EXPECT_EQ(ReadMsr0(), 0u);
  EXPECT_EQ(unit->cpuid().eax, 0u);
  EXPECT_EQ(unit->lwpcb_address(), 0u);
  EXPECT_FALSE(unit->wants_events());
}

// DESIGN §4.1: MSR numbers 0xC0000105 / 0xC0000106; CPUID 0x80000001 ECX 15.
TEST_F(Lwpmsr0Test, ArchitecturalNumbers) {
  EXPECT_EQ(kMsrLwpFeatureEnable, 0xC0000105u);
  EXPECT_EQ(kMsrLwpControlBlock, 0xC0000106u);
  EXPECT_EQ(kCpuidLwpLeaf, 0x8000001Cu);
  EXPECT_EQ(kCpuidExtFeaturesLeaf, 0x80000001u);
  EXPECT_EQ(kCpuidLwpPresentEcxBit, 15u);
  EXPECT_TRUE(LwpUnit::is_lwp_msr(0xC0000105));
  EXPECT_TRUE(LwpUnit::is_lwp_msr(0xC0000106));
  EXPECT_FALSE(LwpUnit::is_lwp_msr(0xC0000104));
  EXPECT_FALSE(LwpUnit::is_lwp_msr(0xC0000107));
}

// lwp_unit.h MsrResult: other MSRs are not the unit's.
TEST_F(Lwpmsr0Test, OtherMsrsAreNotLwp) {
  uint64_t v = 0;
  EXPECT_EQ(unit->write_msr(0xC0000104, 1, 0), MsrResult::kNotLwpMsr);
  EXPECT_EQ(unit->write_msr(0xC0000107, 1, 0), MsrResult::kNotLwpMsr);
  EXPECT_EQ(unit->write_msr(0x10, 1, 0), MsrResult::kNotLwpMsr);
  EXPECT_EQ(unit->read_msr(0xC0000104, 0, v), MsrResult::kNotLwpMsr);
  EXPECT_EQ(unit->read_msr(0x1B, 0, v), MsrResult::kNotLwpMsr);
  EXPECT_EQ(unit->lwpmsr0(), 0u);
}

// Table 3 + DESIGN §4.1: every feature EDX offers can be enabled, with any vector in 47:40.
TEST_F(Lwpmsr0Test, AcceptsAllAvailableFeaturesAndVector) {
  const uint64_t v = kMsr0AllFeatures | msr0_vector(0xEE);
  ASSERT_EQ(unit->write_msr(kMsrLwpFeatureEnable, v, 0), MsrResult::kOk);
  EXPECT_EQ(unit->lwpmsr0(), v);
  EXPECT_EQ(ReadMsr0(), v);
  ASSERT_EQ(unit->write_msr(kMsrLwpFeatureEnable, msr0::kEnabled | msr0::kBre, 0), MsrResult::kOk);
  EXPECT_EQ(ReadMsr0(), msr0::kEnabled | msr0::kBre);
  ASSERT_EQ(unit->write_msr(kMsrLwpFeatureEnable, msr0::kVectorMask, 0), MsrResult::kOk);
  EXPECT_EQ(ReadMsr0(), 0xFF0000000000ull);
  EXPECT_EQ(msr0::kVectorMask, 0x0000FF0000000000ull);
}

// DESIGN §4.1: "only bits set in EDX can be turned on" is per feature: each missing feature #GPs.
TEST_F(Lwpmsr0Test, PerFeatureGpAgainstEdx) {
  struct Case {
    bool Capabilities::*feature;
    uint64_t bit;
  };
  const Case cases[] = {
      {&Capabilities::interrupt, msr0::kInterrupt},
      {&Capabilities::instructions_retired, msr0::kIre},
      {&Capabilities::branches_retired, msr0::kBre},
      {&Capabilities::dcache_misses, msr0::kDme},
  };
  for (const Case& c : cases) {
    caps = FullCaps();
    caps.*(c.feature) = false;
    MakeUnit();
    const uint64_t ok = (kMsr0AllFeatures & ~c.bit) | msr0_vector(kVector);
    EXPECT_EQ(unit->write_msr(kMsrLwpFeatureEnable, ok, 0), MsrResult::kOk) << std::hex << c.bit;
    EXPECT_EQ(unit->write_msr(kMsrLwpFeatureEnable, ok | c.bit, 0), MsrResult::kGeneralProtection)
        << std::hex << c.bit;
    EXPECT_EQ(unit->write_msr(kMsrLwpFeatureEnable, msr0::kEnabled | c.bit, 0),
              MsrResult::kGeneralProtection)
        << std::hex << c.bit;
    EXPECT_EQ(unit->lwpmsr0(), ok) << "unchanged after #GP";
    EXPECT_EQ(unit->cpuid().eax, static_cast<uint32_t>(ok));
  }
}

// DESIGN §4.1: without LWP (EDX 0 clear) EN cannot be set.
TEST_F(Lwpmsr0Test, EnabledGpWhenLwpUnavailable) {
  caps = Capabilities{};
  MakeUnit();
  EXPECT_EQ(unit->write_msr(kMsrLwpFeatureEnable, msr0::kEnabled, 0),
            MsrResult::kGeneralProtection);
  EXPECT_EQ(unit->lwpmsr0(), 0u);
}

// Table 3 bits 4:30 reserved; DESIGN §4.1: any bit outside 0-3, 31, 47:40 is #GP.
TEST_F(Lwpmsr0Test, ReservedBitsGp) {
  const uint64_t base = msr0::kEnabled | msr0::kIre | msr0_vector(7);
  ASSERT_EQ(unit->write_msr(kMsrLwpFeatureEnable, base, 0), MsrResult::kOk);
  int checked = 0;
  for (int bit = 0; bit < 64; ++bit) {
    const uint64_t m = 1ull << bit;
    if (bit <= 3 || bit == 31 || (bit >= 40 && bit <= 47)) continue;
    EXPECT_EQ(unit->write_msr(kMsrLwpFeatureEnable, base | m, 0), MsrResult::kGeneralProtection)
        << "bit " << bit;
    EXPECT_EQ(unit->lwpmsr0(), base) << "bit " << bit;
    ++checked;
  }
  EXPECT_EQ(checked, 64 - 4 - 1 - 8);
  EXPECT_EQ(msr0::kWritableMask, 0x0000FF008000000Full);
}

// DESIGN §4.1: INT with a vector below 16 (the exception vectors) is #GP, state unchanged; INT
// clear makes the vector field plain data; vector 16 is the first one allowed.
TEST_F(Lwpmsr0Test, InterruptVectorBelowSixteenGp) {
  for (unsigned vector = 0; vector < 16; ++vector) {
    const uint64_t before = msr0::kEnabled | msr0::kIre | msr0_vector(0x40 + vector);
    ASSERT_EQ(unit->write_msr(kMsrLwpFeatureEnable, before, 0), MsrResult::kOk);
    EXPECT_EQ(unit->write_msr(kMsrLwpFeatureEnable,
                              msr0::kEnabled | msr0::kInterrupt | msr0_vector(vector), 0),
              MsrResult::kGeneralProtection)
        << "vector " << vector;
    EXPECT_EQ(unit->lwpmsr0(), before) << "unchanged after #GP, vector " << vector;
    EXPECT_EQ(unit->write_msr(kMsrLwpFeatureEnable, msr0::kEnabled | msr0_vector(vector), 0),
              MsrResult::kOk)
        << "vector " << vector << " without INT";
  }
  EXPECT_EQ(
      unit->write_msr(kMsrLwpFeatureEnable, msr0::kEnabled | msr0::kInterrupt | msr0_vector(16), 0),
      MsrResult::kOk);
}

// §5.1/§5.2.1: user code sees LWPMSR0 in CPUID 0x8000001C EAX; EBX/ECX/EDX are the capabilities.
TEST_F(Lwpmsr0Test, CpuidEaxFollowsLwpmsr0) {
  EXPECT_EQ(unit->cpuid(), cpuid_leaf(caps, 0));
  SetMsr0(msr0::kEnabled | msr0::kBre | msr0_vector(0x30));
  EXPECT_EQ(unit->cpuid().eax, 0x5u);
  EXPECT_EQ(unit->cpuid().edx, 0x1Fu);
  SetMsr0(kMsr0AllFeatures | msr0_vector(kVector));
  EXPECT_EQ(unit->cpuid().eax, 0x8000000Fu);
  EXPECT_EQ(unit->cpuid(), cpuid_leaf(caps, kMsr0AllFeatures));
  SetMsr0(0);
  EXPECT_EQ(unit->cpuid().eax, 0u);
}

// lwp_unit.h: clearing LWPMSR0.EN turns LWP off without touching memory.
TEST_F(Lwpmsr0Test, ClearingEnTurnsLwpOffWithoutMemoryAccess) {
  CbSpec cb;
  cb.slots = {{kEventInstructionsRetired, 4, 0}};
  Start(cb);
  RetirePlain(0, 2);
  ASSERT_EQ(unit->lwpcb_address(), kLwpcbAddr);
  mem.clear_log();
  SetMsr0(msr0::kIre | msr0_vector(kVector));
  EXPECT_TRUE(mem.reads().empty());
  EXPECT_TRUE(mem.writes().empty());
  EXPECT_EQ(unit->lwpcb_address(), 0u);
  EXPECT_FALSE(unit->wants_events());
  RetirePlain(2, 10);
  EXPECT_TRUE(stored.empty());
  EXPECT_TRUE(mem.writes().empty());
}

// lwp_unit.h: LWPMSR0 changes other than EN/INT apply at the next LLWPCB.
TEST_F(Lwpmsr0Test, FeatureChangesApplyAtNextLlwpcb) {
  CbSpec cb;
  cb.slots = {{kEventInstructionsRetired, 2, 0}};
  Start(cb);
  SetMsr0(msr0::kEnabled | msr0::kBre | msr0_vector(kVector));  // IRE withdrawn
  RetirePlain(0, 4);
  EXPECT_EQ(stored.size(), 2u) << "IRE still counts until the next LLWPCB";
  EXPECT_EQ(unit->lwpcb_address(), kLwpcbAddr);
  ASSERT_EQ(Llwpcb(kLwpcbAddr), MsrResult::kOk);
  EXPECT_EQ(CbU32(0), 0u) << "no event left: Flags 0";
  EXPECT_EQ(Slwpcb(), 0u);
  RetirePlain(4, 4);
  EXPECT_EQ(stored.size(), 2u);
}

// lwp_unit.h reset(): processor reset sets LWPMSR0 = 0 and LWP off.
TEST_F(Lwpmsr0Test, ResetClearsMsr0AndLwp) {
  CbSpec cb;
  cb.slots = {{kEventInstructionsRetired, 4, 0}};
  Start(cb);
  unit->reset();
  EXPECT_EQ(unit->lwpmsr0(), 0u);
  EXPECT_EQ(unit->lwpcb_address(), 0u);
  EXPECT_FALSE(unit->wants_events());
  EXPECT_EQ(unit->cpuid().eax, 0u);
  RetirePlain(0, 8);
  EXPECT_TRUE(stored.empty());
}

}  // namespace
}  // namespace pmu::lwp::conformance
