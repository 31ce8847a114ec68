// `pmuvm profiles --baseline/--check-migration` through the real binary: main() wires the
// command, its streams and its exit status (0 accepted, 1 refused, 2 usage, 3 libvirt).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/e2e/pmuvm_process.h"

namespace {

using pmuvm_e2e::run;

TEST(ProfilesCli, BaselinePrintsJsonAndLibvirtsAgreement) {
  auto r = run({"profiles", "--baseline", "amd-lwp", "amd-lwp-lite"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "libvirt virConnectBaselineCPU agrees: 45 x86 features\n");
  EXPECT_EQ(r.out.rfind("{\n  \"name\": \"baseline-of-amd-lwp-amd-lwp-lite\",\n", 0), 0u) << r.out;
}

TEST(ProfilesCli, CheckMigrationStatus) {
  auto refused = run({"profiles", "--check-migration", "amd-lwp", "amd-lwp-lite"});
  EXPECT_EQ(refused.status, 1);
  EXPECT_EQ(refused.out.rfind("migration from amd-lwp to amd-lwp-lite: refused\n  model 0x1 != "
                              "0x10\n",
                              0),
            0u)
      << refused.out;
  auto accepted = run({"profiles", "--check-migration", "amd-lwp-lite", "amd-lwp-lite"});
  EXPECT_EQ(accepted.status, 0);
  EXPECT_EQ(accepted.out, "migration from amd-lwp-lite to amd-lwp-lite: accepted\n");
}

TEST(ProfilesCli, UsageErrorsAndLibvirtFailures) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"profiles", "--check-migration", "amd-lwp", "pentium-9"},
           {"profiles", "--check-migration", "amd-lwp"},
           {"profiles", "--baseline", "amd-lwp"},
           {"profiles", "--baseline", "amd-lwp", "amd-lwp-lite", "--check-migration", "a", "b"}}) {
    auto r = run(args);
    EXPECT_EQ(r.status, 2) << ::testing::PrintToString(args);
    EXPECT_EQ(r.err.rfind("pmuvm: ", 0), 0u) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  }
  auto vendors = run({"profiles", "--baseline", "amd-lwp", "intel-netburst"});
  EXPECT_EQ(vendors.status, 3);
  EXPECT_EQ(vendors.err,
            "pmuvm: libvirt virConnectBaselineCPU: operation failed: CPU vendors do not match\n");
}

}  // namespace
