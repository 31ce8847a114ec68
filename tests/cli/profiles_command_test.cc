// `pmuvm profiles` (vmm/cli/profiles_command.h): every mode's output and exit status, without a
// process. --baseline really asks libvirt (test:///default).
#include "vmm/cli/profiles_command.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "vmm/cpu/cpu_profile.h"
#include "vmm/cpu/profile_baseline.h"
#include "vmm/cpu/profile_writer.h"

namespace vmm {
namespace {

struct Output {
  int status = -1;
  std::string out, err;
};

Output RunProfiles(ProfilesCommand::Mode mode, std::vector<std::string> args) {
  ProfilesCommand cmd;
  cmd.mode = mode;
  if (mode == ProfilesCommand::Mode::kDescribe) cmd.name = args.at(0);
  if (mode == ProfilesCommand::Mode::kBaseline) cmd.baseline = args;
  if (mode == ProfilesCommand::Mode::kCheckMigration) cmd.check_migration = args;
  std::ostringstream out, err;
  Output o;
  o.status = run_profiles_command(cmd, out, err);
  o.out = out.str();
  o.err = err.str();
  return o;
}

Output Baseline(std::vector<std::string> args) {
  return RunProfiles(ProfilesCommand::Mode::kBaseline, std::move(args));
}
Output Check(std::string from, std::string to) {
  return RunProfiles(ProfilesCommand::Mode::kCheckMigration, {std::move(from), std::move(to)});
}

std::string TempFile(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ProfilesCommand, BaselineIsTheComputedProfileAsJsonAfterLibvirtAgreed) {
  const Output o = Baseline({"amd-lwp", "amd-lwp-lite"});
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_EQ(o.err, "libvirt virConnectBaselineCPU agrees: 45 x86 features\n");
  const Result<CpuProfile> want =
      compute_baseline({*builtin_profile("amd-lwp"), *builtin_profile("amd-lwp-lite")});
  ASSERT_TRUE(want.ok()) << want.error().message;
  EXPECT_EQ(o.out, to_profile_json(*want));
}

TEST(ProfilesCommand, BaselineOutputIsUsableAsCpuFile) {
  const Output o = Baseline({"amd-lwp", "amd-lwp-lite"});
  ASSERT_EQ(o.status, 0) << o.err;
  const std::string path = TempFile("baseline.json", o.out);
  Result<CpuProfile> r = resolve_cpu_option(path);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->name, "baseline-of-amd-lwp-amd-lwp-lite");
  // ... and a member of the next --baseline, and its guest may go where amd-lwp-baseline's may.
  EXPECT_EQ(Baseline({path, "amd-lwp"}).status, 0);
  EXPECT_EQ(Check(path, "amd-lwp").out, "migration from " + path + " to amd-lwp: accepted\n");
}

TEST(ProfilesCommand, BaselineErrors) {
  const Output unknown = Baseline({"amd-lwp", "pentium-9"});
  EXPECT_EQ(unknown.status, 2);
  EXPECT_EQ(unknown.out, "");
  EXPECT_EQ(unknown.err.rfind("pmuvm: unknown CPU profile 'pentium-9'", 0), 0u) << unknown.err;
  const std::string bad = TempFile("bad.json", "{\n  \"name\": \"x\",\n  \"vendor\": ,\n}\n");
  EXPECT_EQ(Baseline({"amd-lwp", bad}).err,
            "pmuvm: " + bad +
                ":3:13: JSON syntax error while parsing value - unexpected ','; "
                "expected '[', '{', or a literal\n");
  // libvirt refuses two vendors: status 3 with libvirt's message, and nothing on stdout.
  const Output vendors = Baseline({"amd-lwp", "intel-netburst"});
  EXPECT_EQ(vendors.status, 3);
  EXPECT_EQ(vendors.out, "");
  EXPECT_EQ(vendors.err,
            "pmuvm: libvirt virConnectBaselineCPU: operation failed: CPU vendors do not match\n");
}

TEST(ProfilesCommand, CheckMigration) {
  const Output refused = Check("amd-lwp", "amd-lwp-lite");
  EXPECT_EQ(refused.status, 1);
  EXPECT_EQ(refused.out,
            "migration from amd-lwp to amd-lwp-lite: refused\n"
            "  model 0x1 != 0x10\n"
            "  LWP feature interrupt missing\n"
            "  LWP feature BRE missing\n"
            "  LWP feature DME missing\n"
            "  LWP max_events 1 < 3\n"
            "  LWP feature data_address missing\n"
            "  LWP feature cache_level_filter missing\n"
            "  LWP feature cache_latency_filter missing\n");
  EXPECT_EQ(refused.err, "");
  const Output accepted = Check("amd-lwp-baseline", "amd-lwp");
  EXPECT_EQ(accepted.status, 0);
  EXPECT_EQ(accepted.out, "migration from amd-lwp-baseline to amd-lwp: accepted\n");
  const Output unknown = Check("amd-lwp", "nope");
  EXPECT_EQ(unknown.status, 2);
  EXPECT_EQ(unknown.out, "");
  EXPECT_EQ(unknown.err.rfind("pmuvm: unknown CPU profile 'nope'", 0), 0u) << unknown.err;
}

TEST(ProfilesCommand, ListAndDescribe) {
  const Output list = RunProfiles(ProfilesCommand::Mode::kList, {});
  EXPECT_EQ(list.status, 0);
  EXPECT_EQ(list.out.rfind("amd-lwp  AMD family 15h-like", 0), 0u) << list.out;
  const Output one = RunProfiles(ProfilesCommand::Mode::kDescribe, {"intel-netburst"});
  EXPECT_EQ(one.status, 0);
  EXPECT_EQ(one.out.rfind("intel-netburst - ", 0), 0u);
  EXPECT_EQ(RunProfiles(ProfilesCommand::Mode::kDescribe, {"nope"}).status, 2);
}

}  // namespace
}  // namespace vmm
