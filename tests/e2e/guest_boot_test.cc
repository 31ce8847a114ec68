// End-to-end tests that boot the bundled guest kernel under real KVM (issue 3): boot to the
// first user instruction, syscalls, two tasks switching, exit-status propagation, the LLWPCB/
// SLWPCB round trip through the #UD path, LWPMSR0 #GP, CPUID at CPL 0 matching the profile, and
// the task-fault rule. On a machine without /dev/kvm every test here is skipped, saying why.
#include <gtest/gtest.h>

#include "tests/e2e/pmuvm_process.h"

namespace {

using pmuvm_e2e::run;
using pmuvm_e2e::runfile;

class GuestBoot : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!pmuvm_e2e::kvm_usable(&why)) GTEST_SKIP() << why;
  }
  static std::string program(const std::string& name) { return runfile("guest/programs/" + name); }
};

TEST_F(GuestBoot, HelloPrintsItsArgumentsAndExitsZero) {
  auto r = run({"run", "--", program("hello"), "one", "two"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("hello from hello (3 arguments)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("argv[2] = \"two\""), std::string::npos) << r.out;
}

TEST_F(GuestBoot, ExitStatusIsPropagated) {
  auto r = run({"run", "--", program("exit_code"), "7"});
  EXPECT_EQ(r.status, 7) << r.out << r.err;
  auto zero = run({"run", "--", program("exit_code"), "0", "--", program("hello")});
  EXPECT_EQ(zero.status, 0) << zero.out << zero.err;
}

TEST_F(GuestBoot, TwoTasksSwitch) {
  auto r = run({"run", "--", program("yield_ping"), "5", "A", "--", program("yield_ping"), "5", "B"});
  EXPECT_EQ(r.status, 0) << r.err;
  const size_t a1 = r.out.find("A ping 1/5"), b1 = r.out.find("B ping 1/5"),
               a5 = r.out.find("A ping 5/5");
  ASSERT_NE(a1, std::string::npos) << r.out;
  ASSERT_NE(b1, std::string::npos) << r.out;
  ASSERT_NE(a5, std::string::npos) << r.out;
  EXPECT_LT(b1, a5) << "B ran before A finished: the tasks interleave\n" << r.out;
}

TEST_F(GuestBoot, TwoVcpus) {
  auto r = run({"run", "--vcpus", "2", "--", program("yield_ping"), "20", "A", "--",
                program("yield_ping"), "20", "B"});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("A done"), std::string::npos);
  EXPECT_NE(r.out.find("B done"), std::string::npos);
}

TEST_F(GuestBoot, LlwpcbSlwpcbRoundTripThroughTheUdPath) {
  auto r = run({"run", "--", program("lwp_basic")});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PASS: LLWPCB writes Flags"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PASS: SLWPCB returns the LWPCB address"), std::string::npos) << r.out;
}

TEST_F(GuestBoot, CpuidAtCpl0MatchesTheProfile) {
  auto r = run({"run", "--", program("lwp_basic")});
  EXPECT_NE(r.out.find("eax=0x8000000f ebx=0x1032040 ecx=0xc000002a edx=0x1f"), std::string::npos)
      << r.out;
  auto lite = run({"run", "--cpu", "amd-lwp-lite", "--", program("lwp_basic")});
  EXPECT_NE(lite.out.find("eax=0x3 ebx=0x1012030 ecx=0xa edx=0x5"), std::string::npos) << lite.out;
}

TEST_F(GuestBoot, MisalignedLlwpcbEndsTheTaskWithStatus11) {
  auto r = run({"run", "--", program("lwp_bad")});
  EXPECT_EQ(r.status, 11) << r.out << r.err;
  EXPECT_NE(r.out.find("LLWPCB"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
}

TEST_F(GuestBoot, NoLwpProfileHasNoLwp) {
  auto r = run({"run", "--cpu", "intel-netburst", "--", program("lwp_basic")});
  EXPECT_EQ(r.status, 1) << r.out;  // lwp_basic reports LWP not enabled
  EXPECT_NE(r.out.find("LWP is not enabled"), std::string::npos) << r.out;
}

}  // namespace
