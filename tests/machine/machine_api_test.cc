// The API socket's adapter to a running machine (vmm/machine/machine_api.h) against a fake machine:
// every pause it takes for a request is given back, also when that request fails by an exception.
#include "vmm/machine/machine_api.h"

#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <stdexcept>
#include <string>

#include "tests/support/unix_sockets.h"
#include "vmm/memory/guest_ram.h"

namespace vmm {
namespace {

class FakeMachine : public MachineControl {
 public:
  GuestRam& guest_ram() override { return ram_; }
  SnapshotManifest manifest() override { throw std::runtime_error("the kernel path is not UTF-8"); }
  bool pause() override {
    ++pauses;
    return life_.hold();
  }
  void resume() override {
    ++resumes;
    life_.release();
  }
  VmLifecycle& lifecycle() override { return life_; }
  StateSections capture_state() override { return {}; }
  void set_dirty_tracking(bool) override {}
  std::vector<uint64_t> take_dirty_pages() override { return {}; }
  nlohmann::json describe() override { return {{"state", "running"}}; }
  nlohmann::json pmu_state() override { throw std::runtime_error("unreadable"); }
  Status shut_down() override { return life_.shut_down(); }
  void handed_over() override {}

  int pauses = 0, resumes = 0;

 private:
  GuestRam ram_{1 << 20};
  VmLifecycle life_{0, [] {}};  // no vCPUs: every hold is immediate
};

// A machine whose manifest can be sent (the golden snapshot's).
class SilentMachine : public FakeMachine {
 public:
  SnapshotManifest manifest() override {
    std::ifstream in("tests/snapshot/golden/lwp_kvm.manifest.json");
    std::stringstream text;
    text << in.rdbuf();
    return parse_manifest(text.str()).value();
  }
  nlohmann::json describe() override {
    return {{"state", lifecycle().ended() ? "ended" : "running"}};
  }
};

std::string fresh_dir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return std::string(t ? t : "/tmp") + "/" + name;
}

// A snapshot that throws (writing its manifest failed) answers 500 with the reason, and the VM
// runs on: before, the exception skipped the resume and the VM stayed paused for good.
TEST(MachineApiTest, AFailedSnapshotResumesTheVm) {
  FakeMachine m;
  MachineApi api(m);
  const api::ApiResponse r = api.snapshot("file://" + fresh_dir("snap-throws"));
  EXPECT_EQ(r.status, 500);
  EXPECT_NE(r.body.dump().find("the kernel path is not UTF-8"), std::string::npos) << r.body.dump();
  EXPECT_EQ(m.pauses, 1);
  EXPECT_EQ(m.resumes, 1) << "the VM was left paused";
  EXPECT_EQ(api.resume().status, 409) << "the user never paused it";
}

TEST(MachineApiTest, AFailedPmuReadResumesTheVm) {
  FakeMachine m;
  MachineApi api(m);
  EXPECT_EQ(api.pmu().status, 500);
  EXPECT_EQ(m.pauses, m.resumes);
}

// While a migration runs (here: to a destination that takes the connection and says nothing),
// the API answers: info says "migrating", calls that would touch the VM are refused with 409,
// and a shutdown ends the run, which ends the migration at once (before, every call waited
// behind the migration, ping included, and SIGTERM could not end it).
TEST(MachineApiTest, DuringAMigrationTheApiAnswersAndAShutdownEndsIt) {
  char dir[] = "/tmp/pmuvm-api-mig.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/in.sock";
  const int listener = pmuvm_testing::listen_unix(path, 1);
  ASSERT_GE(listener, 0);

  SilentMachine m;
  MachineApi api(m);
  api::ApiResponse migration;
  std::thread migrating([&] { migration = api.send_migration("unix:" + path, 600'000); });
  const int peer = accept(listener, nullptr, nullptr);  // the source connected: it is migrating
  ASSERT_GE(peer, 0);
  api::ApiResponse info;
  do info = api.info();
  while (info.body["state"] != "migrating");  // set before the connect: at once
  EXPECT_EQ(api.ping().status, 200);
  EXPECT_EQ(api.pause().status, 409);
  EXPECT_EQ(api.snapshot("file://" + fresh_dir("snap-mig")).body["error"],
            "a migration is in progress");
  EXPECT_EQ(api.send_migration("unix:" + path, std::nullopt).status, 409);
  EXPECT_EQ(api.shutdown().status, 200);
  migrating.join();
  EXPECT_EQ(migration.status, 409);
  EXPECT_NE(migration.body.dump().find("the VM's run ended during the migration"),
            std::string::npos)
      << migration.body.dump();
  EXPECT_EQ(api.info().body["state"], "ended");
  close(peer);
  close(listener);
  unlink(path.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace vmm
