// Snapshots and live migration end to end (DESIGN §4.10), inside a KVM host: a profiled guest
// is migrated or snapshotted in the middle of its run and must produce byte-identical output,
// LWP records (--lwp-trace), report and exit status to the same run without interruption; bad
// snapshots and bad migration streams are refused with a reason while the source runs on.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/e2e/guest_test.h"

namespace pmuvm_e2e {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool wait_for_socket(const std::string& path, Child& owner, double seconds = 30) {
  const auto start = Clock::now();
  struct stat st{};
  while (seconds_since(start) < seconds) {
    if (::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) return true;
    if (owner.ended()) return false;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

Result ctl(const std::string& socket, const std::string& verb, const std::string& body = "") {
  std::vector<std::string> args = {"ctl", "--api-socket", socket, verb};
  if (!body.empty()) args.push_back(body);
  return run(args, 120);
}

// One workload: pmuvm run options and programs, the same for every run of a case.
struct Workload {
  std::vector<std::string> args;
};

std::string guest_program(const std::string& name) { return runfile("guest/programs/" + name); }

class MigrationTest : public GuestTest {
 protected:
  // The uninterrupted run, with its LWP trace, and how long it took.
  struct Baseline {
    Result result;
    std::string trace;
    double seconds = 0;
  };
  Baseline baseline(const Workload& w, const std::string& name) {
    const std::string trace = temp(name + ".trace");
    std::vector<std::string> args = {"run", "--lwp-report", "-", "--lwp-trace", trace};
    args.insert(args.end(), w.args.begin(), w.args.end());
    const auto start = Clock::now();
    Baseline b;
    b.result = run(args, 300);
    b.seconds = seconds_since(start);
    b.trace = slurp(trace);
    return b;
  }

  // The workload migrated once, `delay` seconds after its start, to a destination started
  // first; returns source + destination output and trace, and the destination's status.
  struct Halves {
    Result source, destination, ctl;
    std::string trace;
  };
  Halves migrate_once(const Workload& w, const std::string& name, double delay,
                      const std::vector<std::string>& destination_cpu = {}) {
    const std::string api = temp(name + ".api"), incoming = temp(name + ".mig");
    const std::string trace1 = temp(name + ".src.trace"), trace2 = temp(name + ".dst.trace");
    std::vector<std::string> dargs = {"run", "--incoming", "unix:" + incoming, "--lwp-report",
                                      "-", "--lwp-trace", trace2};
    dargs.insert(dargs.end(), destination_cpu.begin(), destination_cpu.end());
    Child destination(dargs, 300);
    EXPECT_TRUE(wait_for_socket(incoming, destination)) << destination.err();
    std::vector<std::string> sargs = {"run", "--api-socket", api, "--lwp-report", "-",
                                      "--lwp-trace", trace1};
    sargs.insert(sargs.end(), w.args.begin(), w.args.end());
    Child source(sargs, 300);
    EXPECT_TRUE(wait_for_socket(api, source)) << source.err();
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    Halves h;
    h.ctl = ctl(api, "vm.send-migration", R"({"destination_url":"unix:)" + incoming + R"("})");
    h.source = source.wait();
    h.destination = destination.wait();
    h.trace = slurp(trace1) + slurp(trace2);
    return h;
  }

  // Migrated at five points spread over the run: every time the halves add up to the baseline.
  void check_migrations(const Workload& w, const std::string& name) {
    const Baseline b = baseline(w, name);
    ASSERT_EQ(b.result.status, 0) << b.result.out << b.result.err;
    ASSERT_FALSE(b.trace.empty() && name.find("lwp") != std::string::npos);
    for (double fraction : {0.1, 0.3, 0.5, 0.7, 0.85}) {
      SCOPED_TRACE("migrated at " + std::to_string(fraction) + " of the run");
      const Halves h = migrate_once(w, name, fraction * b.seconds);
      ASSERT_EQ(h.ctl.status, 0) << h.ctl.out << h.ctl.err << h.source.err;
      EXPECT_EQ(h.source.status, 0) << h.source.err;
      EXPECT_EQ(h.source.out + h.destination.out, b.result.out)
          << "source:\n" << h.source.out << "\ndestination:\n" << h.destination.out
          << h.destination.err;
      EXPECT_EQ(h.destination.status, b.result.status) << h.destination.err;
      EXPECT_EQ(h.trace, b.trace);
      EXPECT_NE(h.source.out, "") << "migrated before the guest printed anything";
    }
  }

  // Paused at `fraction` of the run, snapshotted, resumed; the source finishes as if nothing
  // happened, and the snapshot restored finishes the run again from the pause point.
  void check_snapshot(const Workload& w, const std::string& name, double fraction) {
    const Baseline b = baseline(w, name + ".base");
    ASSERT_EQ(b.result.status, 0) << b.result.err;
    const std::string api = temp(name + ".snap.api"), trace1 = temp(name + ".snap.trace");
    const std::string dir = temp(name + ".snapshot");
    std::filesystem::remove_all(dir);
    std::vector<std::string> sargs = {"run", "--api-socket", api, "--lwp-report", "-",
                                      "--lwp-trace", trace1};
    sargs.insert(sargs.end(), w.args.begin(), w.args.end());
    Child source(sargs, 300);
    ASSERT_TRUE(wait_for_socket(api, source)) << source.err();
    std::this_thread::sleep_for(std::chrono::duration<double>(fraction * b.seconds));
    ASSERT_EQ(ctl(api, "vm.pause").status, 0);
    const std::string printed = source.out(), traced = slurp(trace1);
    const Result snap = ctl(api, "vm.snapshot", R"({"destination_url":"file://)" + dir + R"("})");
    ASSERT_EQ(snap.status, 0) << snap.out << snap.err;
    ASSERT_EQ(ctl(api, "vm.resume").status, 0);
    const Result original = source.wait();
    EXPECT_EQ(original.status, b.result.status);
    EXPECT_EQ(original.out, b.result.out) << "a snapshot must not disturb the source";

    const std::string trace2 = temp(name + ".restored.trace");
    const Result restored = run({"restore", "--source", "file://" + dir, "--lwp-report", "-",
                                 "--lwp-trace", trace2}, 300);
    EXPECT_EQ(restored.status, b.result.status) << restored.err;
    EXPECT_EQ(printed + restored.out, b.result.out) << "restored:\n" << restored.out << restored.err;
    EXPECT_EQ(traced + slurp(trace2), b.trace);
    EXPECT_NE(printed, "");
  }
};

// lwp_demo: instructions, branches (predictor) and DCache misses (cache model), with 4 random
// bits per reload (the PRNG): everything the snapshot must carry shows in the records.
const Workload kLwp{{"--cpu", "amd-lwp", "--seed", "7", "--", guest_program("lwp_demo"), "1", "4"}};
// NetBurst sampling: a PMI every 997 user instructions for the whole run.
const Workload kNetburst{{"--cpu", "intel-netburst", "--", guest_program("netburst_sampler"),
                          "640", "997"}};

TEST_F(MigrationTest, LwpProgramMigratedAtFivePointsIsByteIdentical) { check_migrations(kLwp, "lwp"); }

TEST_F(MigrationTest, NetburstProgramMigratedAtFivePointsIsByteIdentical) {
  check_migrations(kNetburst, "netburst");
}

TEST_F(MigrationTest, LwpProgramSnapshottedAndRestoredIsByteIdentical) {
  check_snapshot(kLwp, "lwp", 0.4);
}

TEST_F(MigrationTest, NetburstProgramSnapshottedAndRestoredIsByteIdentical) {
  check_snapshot(kNetburst, "netburst", 0.5);
}

}  // namespace
}  // namespace pmuvm_e2e
