// Snapshot directories (vmm/snapshot/snapshot_dir.h) without KVM: a fake VM's RAM and state go
// to disk and come back equal; every kind of damage is refused with its reason.
#include "vmm/snapshot/snapshot_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tests/support/file_damage.h"
#include "vmm/snapshot/state_sections.h"
#include "vmm/cpu/cpu_profile.h"

namespace {

namespace fs = std::filesystem;

class FakeVm : public vmm::MigratableVm {
 public:
  FakeVm() : ram_(8 << 20) {
    for (uint64_t i = 0; i < ram_.size(); i += 4096) ram_.host(i, 8)[0] = std::byte(i >> 12);
  }
  vmm::GuestRam& guest_ram() override { return ram_; }
  vmm::SnapshotManifest manifest() override {
    vmm::SnapshotManifest m;
    m.vcpus = 2;
    m.mem_mib = 8;
    m.seed = 7;
    m.timer_hz = 100;
    m.stepper = "kvm";
    m.kernel = "bundled kernel";
    m.max_interrupt_rate = 10000;
    m.profile = *vmm::builtin_profile("amd-lwp");
    m.cpuid = {{1, 0, 0, 0x600f12, 0x800, 0x80200001, 0x178bfbff}};
    return m;
  }
  bool pause() override { return true; }
  void resume() override {}
  vmm::StateSections capture_state() override {
    vmm::StateSections s;
    s.add("vcpu0.kvm", std::vector<std::byte>(1000, std::byte{1}));
    s.add("report", std::vector<std::byte>(10, std::byte{2}));
    return s;
  }
  void set_dirty_tracking(bool) override {}
  std::vector<uint64_t> take_dirty_pages() override { return {}; }

 private:
  vmm::GuestRam ram_;
};

std::string temp_dir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  const fs::path p = fs::path(t ? t : "/tmp") / name;
  fs::remove_all(p);
  return p.string();
}

std::string read_error(const std::string& dir) {
  auto r = vmm::read_snapshot_dir(dir);
  if (auto* e = r.error_message()) return *e;
  vmm::GuestRam ram(8 << 20);
  if (auto* e = vmm::load_snapshot_memory(r.value(), ram).error_message()) return *e;
  return "(accepted)";
}

TEST(SnapshotDir, RoundTrip) {
  FakeVm vm;
  const std::string dir = temp_dir("snap-roundtrip");
  ASSERT_TRUE(vmm::write_snapshot_dir(dir, vm).ok());
  auto r = vmm::read_snapshot_dir(dir);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const vmm::SnapshotOnDisk& s = r.value();
  EXPECT_EQ(s.manifest.vcpus, 2u);
  EXPECT_EQ(s.manifest.seed, 7u);
  vmm::CpuProfile expected = vm.manifest().profile;
  expected.source = s.manifest.profile.source;  // where it was read from: the snapshot now
  EXPECT_EQ(s.manifest.profile, expected) << "the profile travels whole";
  EXPECT_EQ(s.manifest.cpuid, vm.manifest().cpuid);
  EXPECT_EQ(s.state.all(), vm.capture_state().all());
  vmm::GuestRam ram(8 << 20);
  ASSERT_TRUE(vmm::load_snapshot_memory(s, ram).ok());
  EXPECT_EQ(std::memcmp(ram.host_base(), vm.guest_ram().host_base(), ram.size()), 0);
}

TEST(SnapshotDir, RefusesANonEmptyDirectoryAndBadUrls) {
  FakeVm vm;
  const std::string dir = temp_dir("snap-busy");
  fs::create_directories(dir);
  std::ofstream(dir + "/precious") << "x";
  EXPECT_EQ(vmm::write_snapshot_dir(dir, vm).error().message,
            "snapshot directory " + dir + " exists and is not empty");
  EXPECT_EQ(vmm::file_url_path("file:///tmp/s"), "/tmp/s");
  EXPECT_EQ(vmm::file_url_path("file://relative"), std::nullopt);
  EXPECT_EQ(vmm::file_url_path("/tmp/s"), std::nullopt);
}

TEST(SnapshotDir, EveryDamageIsRefusedWithItsReason) {
  FakeVm vm;
  const std::string good = temp_dir("snap-good");
  ASSERT_TRUE(vmm::write_snapshot_dir(good, vm).ok());
  auto damaged = [&](const std::string& name, auto apply) {
    const std::string dir = temp_dir("snap-" + name);
    fs::copy(good, dir);
    apply(dir);
    return read_error(dir);
  };
  auto flip = [](const std::string& path, long at) { pmuvm_test::flip_byte(path, at, 1); };
  EXPECT_NE(damaged("mem", [&](const std::string& d) { flip(d + "/memory.bin", 5 << 20); })
                .find("memory.bin fails its checksum (corrupted)"),
            std::string::npos);
  EXPECT_NE(damaged("state", [&](const std::string& d) { flip(d + "/state.bin", 30); })
                .find("state.bin fails its checksum (corrupted)"),
            std::string::npos);
  EXPECT_NE(
      damaged("short", [&](const std::string& d) { fs::resize_file(d + "/memory.bin", 4096); })
          .find("memory.bin is 4096 bytes, the manifest says 8388608 (truncated or replaced)"),
      std::string::npos);
  EXPECT_NE(damaged("nomanifest", [&](const std::string& d) { fs::remove(d + "/manifest.json"); })
                .find("is not a pmuvm snapshot"),
            std::string::npos);
  auto edit_manifest = [&](const std::string& name, const std::string& from,
                           const std::string& to) {
    return damaged(name, [&](const std::string& d) {
      std::ifstream in(d + "/manifest.json");
      std::string m((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const size_t at = m.find(from);
      ASSERT_NE(at, std::string::npos) << from;
      m.replace(at, from.size(), to);
      std::ofstream(d + "/manifest.json") << m;
    });
  };
  const std::string current = std::to_string(vmm::kSnapshotFormatVersion);
  EXPECT_NE(edit_manifest("version", "\"version\": " + current, "\"version\": 1")
                .find("snapshot format version 1 (this pmuvm reads version " + current + ")"),
            std::string::npos);
  EXPECT_NE(edit_manifest("format", "pmuvm-snapshot", "qemu-savevm").find("not a pmuvm snapshot"),
            std::string::npos);
  EXPECT_NE(edit_manifest("stepper", "\"stepper\": \"kvm\"", "\"stepper\": \"magic\"")
                .find("machine.stepper (at 9:5) is \"magic\", not a stepper this pmuvm has"),
            std::string::npos);
  EXPECT_NE(
      edit_manifest("json", "{", "[")
          .find("/manifest.json: at 2:11: JSON syntax error while parsing array - unexpected ':'"),
      std::string::npos);
  // Crafted manifests (issue 20): a profile nested 400 000 deep crashed the reader (SIGSEGV); a
  // rate the command line refuses made every vCPU allocate gigabytes.
  const std::string deep = std::string(400000, '[') + std::string(400000, ']');
  EXPECT_NE(edit_manifest("deep", "\"profile\": {", "\"profile\": {\"deep\": " + deep + ",")
                .find("nests deeper than"),
            std::string::npos);
  EXPECT_NE(
      edit_manifest("rate", "\"max_interrupt_rate\": 10000", "\"max_interrupt_rate\": 4000000000")
          .find("machine.max_interrupt_rate (at 12:5) is 4000000000, over the limit of 1000000"),
      std::string::npos);
}

// Files a snapshot directory holds are read only as regular files of the sizes the manifest
// allows: a FIFO in their place (a crafted directory) is refused, never read from, and a
// symbolic link (to /dev/zero, to another user's file) is not followed.
TEST(SnapshotDir, NonRegularFilesAreRefused) {
  FakeVm vm;
  const std::string good = temp_dir("snap-good-nonreg");
  ASSERT_TRUE(vmm::write_snapshot_dir(good, vm).ok());
  for (const char* name : {"manifest.json", "state.bin", "memory.bin"}) {
    const std::string dir = temp_dir(std::string("snap-dev-") + name);
    fs::copy(good, dir);
    fs::remove(dir + "/" + name);
    fs::create_symlink("/dev/zero", dir + "/" + name);
    EXPECT_NE(read_error(dir).find(std::string(name) + " is a symbolic link"), std::string::npos)
        << read_error(dir);
    fs::remove(dir + "/" + name);
    ASSERT_EQ(mkfifo((dir + "/" + name).c_str(), 0600), 0);
    EXPECT_NE(read_error(dir).find(std::string(name) + " is not a regular file"), std::string::npos)
        << read_error(dir);
  }
}

// The directory itself: not reached through a symbolic link and this user's or root's, for
// reading and for writing (before, both were accepted: another user's directory could swap what
// is read, a link could send a snapshot elsewhere).
TEST(SnapshotDir, ADirectoryOfAnotherUserOrALinkIsRefused) {
  FakeVm vm;
  const std::string good = temp_dir("snap-good-owner");
  ASSERT_TRUE(vmm::write_snapshot_dir(good, vm).ok());
  const std::string link = temp_dir("snap-link");
  fs::create_directory_symlink(good, link);
  EXPECT_EQ(read_error(link), link + " is a symbolic link: name the directory itself");
  EXPECT_EQ(read_error(link + "/"), link + " is a symbolic link: name the directory itself");
  const std::string empty = temp_dir("snap-empty-target");
  fs::create_directories(empty);
  const std::string empty_link = temp_dir("snap-empty-link");
  fs::create_directory_symlink(empty, empty_link);
  EXPECT_EQ(vmm::write_snapshot_dir(empty_link, vm).error().message,
            empty_link + " is a symbolic link: name the directory itself");
  EXPECT_TRUE(fs::is_empty(empty));

  if (geteuid() != 0) GTEST_FAIL() << "chown to another user needs root (the tests run as root)";
  ASSERT_EQ(chown(good.c_str(), 65534, 65534), 0);
  EXPECT_EQ(read_error(good), good + " belongs to uid 65534, neither this user nor root");
  ASSERT_EQ(chown(empty.c_str(), 65534, 65534), 0);
  EXPECT_EQ(vmm::write_snapshot_dir(empty, vm).error().message,
            empty + " belongs to uid 65534, neither this user nor root");
}

// The manifest, which makes the directory a snapshot, is the last file to appear, whole (written
// beside it and renamed): a snapshot cut short leaves no manifest and reads as "not a snapshot".
TEST(SnapshotDir, OnlyFinishedFilesAreLeft) {
  FakeVm vm;
  const std::string dir = temp_dir("snap-files");
  ASSERT_TRUE(vmm::write_snapshot_dir(dir, vm).ok());
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"manifest.json", "memory.bin", "state.bin"}));
}

}  // namespace
