// The source's side of a live migration (vmm/migration/migration_source.h) against scripted
// destinations on a real Unix socket, with a fake VM: the VM is let go only when the destination
// says it runs; every answer has a deadline (a whole message, not the gap between two bytes);
// a stop request ends the migration at once; whenever it fails the VM is resumed.
#include "vmm/migration/migration_source.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include "tests/support/unix_sockets.h"
#include "vmm/memory/guest_ram.h"
#include "vmm/migration/migration_channel.h"
#include "vmm/migration/migration_destination.h"

namespace vmm {
namespace {

using Clock = std::chrono::steady_clock;

// A manifest the destination reads (the golden snapshot's).
SnapshotManifest a_manifest() {
  std::ifstream in("tests/snapshot/golden/lwp_kvm.manifest.json");
  std::stringstream text;
  text << in.rdbuf();
  auto parsed = parse_manifest(text.str());
  EXPECT_TRUE(parsed.ok()) << parsed.error().message;
  return parsed.ok() ? parsed.value() : SnapshotManifest{};
}

class FakeVm : public MigratableVm {
 public:
  GuestRam& guest_ram() override { return ram_; }
  SnapshotManifest manifest() override { return a_manifest(); }
  bool pause() override {
    ++pauses;
    return true;
  }
  void resume() override { ++resumes; }
  StateSections capture_state() override { return {}; }
  void set_dirty_tracking(bool) override {}
  std::vector<uint64_t> take_dirty_pages() override { return {}; }

  std::atomic<int> pauses = 0, resumes = 0;

 private:
  GuestRam ram_{1 << 20};
};

// A listening socket in a fresh directory, and the destination's script run on the connection.
class Destination {
 public:
  explicit Destination(std::function<void(int fd)> script) {
    char dir[] = "/tmp/pmuvm-handover.XXXXXX";
    EXPECT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/in.sock";
    listener_ = pmuvm_testing::listen_unix(path_, 1);
    EXPECT_GE(listener_, 0);
    thread_ = std::thread([this, script] {
      const int fd = accept(listener_, nullptr, nullptr);
      if (fd >= 0) script(fd);
    });
  }
  ~Destination() {
    wait();
    close(listener_);
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  const std::string& path() const { return path_; }
  // Until its script has returned (what it sets after its last message is then set).
  void wait() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::string dir_, path_;
  int listener_ = -1;
  std::thread thread_;
};

// Takes everything up to the state and says ready; returns the channel for the rest.
void up_to_ready(MigrationChannel& ch) {
  ch.expect(MigrationMessage::kHello, 5000);
  ch.send(MigrationMessage::kAccept, nullptr, 0);
  std::vector<std::byte> payload;
  while (ch.receive(payload, 5000) != MigrationMessage::kState) {
  }
  ch.send(MigrationMessage::kReady, nullptr, 0);
}

MigrationLimits limits(int deadline_ms) {
  MigrationLimits l;
  l.deadline_ms = deadline_ms;
  return l;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

TEST(MigrationHandover, TheVmIsLetGoWhenTheRealDestinationSaysItRuns) {
  std::atomic<bool> committed = false;
  Destination d([&](int fd) {
    IncomingMigration in = IncomingMigration::over_connection(fd);
    in.accept();
    GuestRam ram(1 << 20);
    (void)in.receive(ram);
    in.commit([] { return std::nullopt; });
    committed = true;
  });
  FakeVm vm;
  const MigrationOutcome out = migrate_to(d.path(), vm);
  EXPECT_TRUE(out.handed_over) << out.error;
  EXPECT_EQ(vm.pauses, 1);
  EXPECT_EQ(vm.resumes, 0);  // it lives on at the destination
  // The source lets go when it hears "running"; the destination's commit() returns after
  // sending it, so its flag is set by the time its thread ends, not when the source returns.
  d.wait();
  EXPECT_TRUE(committed);
}

// A destination that took the commit and then never said it runs (it died, or stalled): before,
// the source let go at the commit and the VM was lost with the destination. Now it resumes.
TEST(MigrationHandover, NoRunningByTheDeadlineLeavesTheVmRunningHere) {
  Destination d([](int fd) {
    MigrationChannel ch(fd);
    up_to_ready(ch);
    ch.expect(MigrationMessage::kCommit, 5000);
    std::vector<std::byte> rest;  // silent until the source gives up and closes
    try {
      ch.receive(rest, 5000);
    } catch (const MigrationError&) {
    }
  });
  FakeVm vm;
  const MigrationOutcome out = migrate_to(d.path(), vm, limits(300));
  EXPECT_FALSE(out.handed_over);
  EXPECT_EQ(out.error, "the migration peer did not answer before the migration's deadline");
  EXPECT_EQ(vm.pauses, 1);
  EXPECT_EQ(vm.resumes, 1);
}

// A destination that drips its answer one byte at a time (each byte well inside the deadline)
// gains nothing: the answer must be whole by the deadline (before, a byte per poll() kept the
// source waiting for ever).
TEST(MigrationHandover, AnAnswerDrippedByteByByteIsGivenUpAtTheDeadline) {
  std::atomic<bool> stop_dripping = false;
  Destination d([&](int fd) {
    MigrationChannel ch(fd);
    ch.expect(MigrationMessage::kHello, 5000);
    const unsigned char accept_frame[20] = {'P', 'M', 'I', 'G', 2};
    for (size_t i = 0; i < sizeof accept_frame && !stop_dripping; ++i) {
      // MSG_NOSIGNAL: the source gives up and closes while this drips (a SIGPIPE would end the
      // test).
      if (send(fd, accept_frame + i, 1, MSG_NOSIGNAL) != 1) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  FakeVm vm;
  const auto start = Clock::now();
  const MigrationOutcome out = migrate_to(d.path(), vm, limits(500));
  const double took = seconds_since(start);
  stop_dripping = true;
  EXPECT_FALSE(out.handed_over);
  EXPECT_EQ(out.error, "the migration peer did not answer within 0.5 s");
  EXPECT_LT(took, 1.5);
  EXPECT_EQ(vm.pauses, 0);
}

// The paused phase has one deadline over all its messages: a destination answering each just in
// time still cannot keep the VM paused longer than it.
TEST(MigrationHandover, ThePausedPhaseEndsAtOneDeadline) {
  Destination d([](int fd) {
    MigrationChannel ch(fd);
    ch.expect(MigrationMessage::kHello, 5000);
    ch.send(MigrationMessage::kAccept, nullptr, 0);
    std::vector<std::byte> payload;
    while (ch.receive(payload, 5000) != MigrationMessage::kState) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(350));  // inside one answer's deadline
    ch.send(MigrationMessage::kReady, nullptr, 0);
    try {
      ch.expect(MigrationMessage::kCommit, 5000);
      std::this_thread::sleep_for(std::chrono::milliseconds(350));
      ch.send(MigrationMessage::kRunning, nullptr, 0);
    } catch (const MigrationError&) {
    }
  });
  FakeVm vm;
  const MigrationOutcome out = migrate_to(d.path(), vm, limits(500));
  EXPECT_FALSE(out.handed_over);
  EXPECT_EQ(out.error, "the migration peer did not answer before the migration's deadline");
  EXPECT_EQ(vm.resumes, 1);
}

// A stop request (SIGTERM, vm.shutdown) ends a migration waiting on a silent destination within
// a poll slice, whatever its deadline.
TEST(MigrationHandover, AStopRequestEndsTheMigrationAtOnce) {
  Destination d([](int fd) {
    MigrationChannel ch(fd);
    std::vector<std::byte> payload;
    try {
      ch.receive(payload, 5000);  // the hello
      ch.receive(payload, 5000);  // nothing more comes: the source gives up and closes
    } catch (const MigrationError&) {
    }
  });
  FakeVm vm;
  const auto start = Clock::now();
  MigrationLimits l = limits(60'000);
  l.stop_check = [&]() -> std::optional<std::string> {
    if (seconds_since(start) > 0.2) return "the VM's run ended";
    return std::nullopt;
  };
  const MigrationOutcome out = migrate_to(d.path(), vm, l);
  EXPECT_FALSE(out.handed_over);
  EXPECT_EQ(out.error, "the VM's run ended");
  EXPECT_LT(seconds_since(start), 2.0);
}

// The destination's side: a source that gave up (closed) after the commit makes the "running"
// fail, so the destination does not run the VM as well.
TEST(MigrationHandover, TheDestinationDoesNotRunWhenTheSourceCannotHearIt) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  std::thread source([fd = fds[0]] {
    MigrationChannel ch(fd);
    ch.send(MigrationMessage::kHello, to_json_text(a_manifest()));
    ch.expect(MigrationMessage::kAccept, 5000);
    ch.send(MigrationMessage::kState, StateSections().serialize());
    ch.expect(MigrationMessage::kReady, 5000);
    shutdown(fd, SHUT_RD);  // it will not hear "running" (it gave up, say)
    ch.send(MigrationMessage::kCommit, nullptr, 0);
  });
  IncomingMigration in = IncomingMigration::over_connection(fds[1]);
  in.accept();
  GuestRam ram(1 << 20);
  (void)in.receive(ram);
  EXPECT_THROW(in.commit([] { return std::nullopt; }), MigrationError);
  source.join();
}

}  // namespace
}  // namespace vmm
