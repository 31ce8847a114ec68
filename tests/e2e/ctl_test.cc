// `pmuvm ctl` end to end: the real binary against an API server on a fake VM in this process
// (DESIGN §4.10). Runs anywhere: no KVM. The answers and exit statuses in detail are
// tests/api's; this checks that main.cc dispatches `ctl` and passes the body through.
#include <gtest/gtest.h>

#include "tests/api/api_test_support.h"
#include "tests/e2e/pmuvm_process.h"

namespace vmm::api {
namespace {

using pmuvm_e2e::run;

using PmuvmCtlTest = ApiServerTest;

TEST_F(PmuvmCtlTest, AnswerOnStdoutExit0) {
  auto r = run(
      {"ctl", "--api-socket", socket_, "vm.snapshot", R"({"destination_url":"file:///srv/s"})"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out,
            "{\n  \"call\": \"vm.snapshot\",\n  \"destination_url\": \"file:///srv/s\"\n}\n");
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(vm_.calls(), std::vector<std::string>{"vm.snapshot file:///srv/s"});
}

TEST_F(PmuvmCtlTest, ErrorAnswerExit1) {
  vm_.respond = [](const std::string&, const std::string&) {
    return error_response(409, "the VM is already paused");
  };
  auto r = run({"ctl", "--api-socket", socket_, "vm.pause"});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "pmuvm: vm.pause: 409 the VM is already paused\n");
}

TEST_F(PmuvmCtlTest, UsageErrorsExit2) {
  EXPECT_EQ(run({"ctl", "--api-socket", socket_, "vm.reboot"}).status, 2);
  EXPECT_EQ(run({"ctl", "--api-socket", socket_, "vm.pause", "{"}).status, 2);
  EXPECT_EQ(run({"ctl", "vm.pause"}).status, 2);
  EXPECT_TRUE(vm_.calls().empty());
}

TEST(PmuvmCtl, NoServerExit3) {
  ShortTempDir dir;
  const std::string path = dir.path() + "/none.sock";
  auto r = run({"ctl", "--api-socket", path, "vmm.ping"});
  EXPECT_EQ(r.status, 3);
  EXPECT_EQ(r.err, "pmuvm: cannot connect to " + path + ": No such file or directory\n");
}

// --paused without the socket that could resume it is refused before anything starts. (The
// API socket on a running VM: tests/e2e:migration_test and migration_refusal_test.)
TEST(PmuvmRun, PausedNeedsTheApiSocket) {
  auto r = run({"run", "--paused", "--", "/nonexistent.elf"});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "pmuvm: --paused needs --api-socket (only vm.resume can start the VM)\n");
}

}  // namespace
}  // namespace vmm::api
