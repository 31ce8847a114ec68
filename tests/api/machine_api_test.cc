// The API socket's adapter to a running machine (vmm/machine_api.h) against a fake machine: every
// pause it takes for a request is given back, also when that request fails by an exception.
#include "vmm/machine_api.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

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

}  // namespace
}  // namespace vmm
