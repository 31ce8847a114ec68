// Snapshots and live migration end to end (DESIGN §4.10), inside a KVM host: a profiled guest
// is migrated or snapshotted in the middle of its run and must produce byte-identical output,
// LWP records (--lwp-trace), report and exit status to the same run without interruption; bad
// snapshots and bad migration streams are refused with a reason while the source runs on.
// Every migration and snapshot lands at a point of the guest's progress, never of wall time: the
// VM pauses itself there (`run --pause-at-instructions N`, N a fraction of the instructions the
// uninterrupted run counted) and the test waits for pmuvm's "paused:" line before it acts.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "pmu/state_archive.h"
#include "tests/e2e/guest_test.h"
#include "tests/support/file_damage.h"
#include "tests/support/unix_sockets.h"
#include "vmm/cpu/cpu_profile.h"
#include "vmm/cpu/migration_check.h"
#include "vmm/snapshot/file_checksum.h"
#include "vmm/snapshot/state_sections.h"

namespace pmuvm_e2e {
namespace {

// Waits until the VM of `owner` paused itself at its progress point (run --pause-at-...).
::testing::AssertionResult paused_at_its_point(Child& owner) {
  std::string why;
  if (wait_for_stderr(owner, "pmuvm: paused: ", 300, &why)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << why;
}

// `run --pause-at-instructions N`.
std::vector<std::string> pause_at(uint64_t instructions) {
  return {"--pause-at-instructions", std::to_string(instructions)};
}

Result ctl(const std::string& socket, const std::string& verb, const std::string& body = "") {
  std::vector<std::string> args = {"ctl", "--api-socket", socket, verb};
  if (!body.empty()) args.push_back(body);
  return run(args, 120);
}

// One workload: pmuvm run options and programs, the same for every run of a case.
struct Workload {
  std::vector<std::string> args;
  // The source's stepper (empty: the default); destinations and restores take it from the
  // manifest. The baseline always steps one instruction per exit.
  std::string stepper;
  std::vector<std::string> stepper_args() const {
    return stepper.empty() ? std::vector<std::string>{}
                           : std::vector<std::string>{"--stepper", stepper};
  }
  // A resumed VM's report names its programs' addresses from the files --symbols gives (it has
  // no programs on its command line): the workload's programs, the first after each `--`.
  std::vector<std::string> symbols() const {
    std::vector<std::string> out;
    for (size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == "--") out.insert(out.end(), {"--symbols", args[i + 1]});
    return out;
  }
};

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::string guest_program(const std::string& name) { return runfile("guest/programs/" + name); }

// Unix socket paths must fit sun_path (108 bytes); Bazel's TEST_TMPDIR is far longer.
std::string socket_path(const std::string& name) {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/pmuvm-sock-XXXXXX";
    return std::string(mkdtemp(tmpl));
  }();
  return dir + "/" + name;
}

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

class MigrationTest : public GuestTest {
 protected:
  // The uninterrupted run, with its LWP trace, and how many instructions it counted (--stats:
  // where the pause points go).
  struct Baseline {
    Result result;
    std::string trace;
    uint64_t counted = 0;
    // The point at `fraction` of the run.
    uint64_t at(double fraction) const { return static_cast<uint64_t>(fraction * counted) + 1; }
  };
  Baseline baseline(const Workload& w, const std::string& name) {
    static std::map<std::string, Baseline> done;  // one uninterrupted run per workload and suite
    if (auto it = done.find(name); it != done.end()) return it->second;
    const std::string trace = temp(name + ".trace");
    // With one exit per instruction: the migrated and restored runs (block stepping, the
    // default) must match it byte for byte, so migration and block stepping are checked at once.
    std::vector<std::string> args = {"run",          "--stats", "--stepper",   "kvm-single",
                                     "--lwp-report", "-",       "--lwp-trace", trace};
    args.insert(args.end(), w.args.begin(), w.args.end());
    Baseline b;
    b.result = run(args, 300);
    b.trace = slurp(trace);
    b.counted = counted_instructions(b.result.err);
    // --stats goes to stderr, which no case compares: the other runs go without it.
    done[name] = b;
    return b;
  }

  // A destination waiting at its own socket, with an API socket of its own (so the VM can be
  // migrated on from there).
  struct Hop {
    std::string incoming, api, trace;
    std::unique_ptr<Child> process;
  };
  Hop start_destination(const std::string& name, const std::vector<std::string>& extra = {}) {
    Hop h{socket_path(name + ".mig"), socket_path(name + ".api"), temp(name + ".trace"), nullptr};
    std::filesystem::remove(h.trace);
    std::filesystem::remove(h.incoming);  // an earlier destination's: not this one's yet
    std::vector<std::string> args = {
        "run",          "--incoming", "unix:" + h.incoming, "--api-socket", h.api,
        "--lwp-report", "-",          "--lwp-trace",        h.trace};
    args.insert(args.end(), extra.begin(), extra.end());
    h.process = std::make_unique<Child>(args, 300);
    EXPECT_TRUE(wait_for_incoming_socket(h.incoming, *h.process)) << h.process->err();
    return h;
  }
  // `paused`: the source starts paused (run --paused), so what follows does not race the guest.
  // `extra`: more options (a pause point).
  Hop start_source(const Workload& w, const std::string& name, bool paused = false,
                   const std::vector<std::string>& extra = {}) {
    Hop h{"", socket_path(name + ".api"), temp(name + ".trace"), nullptr};
    std::filesystem::remove(h.trace);
    std::vector<std::string> args = {"run", "--api-socket", h.api,  "--lwp-report",
                                     "-",   "--lwp-trace",  h.trace};
    if (paused) args.push_back("--paused");
    args.insert(args.end(), extra.begin(), extra.end());
    args = concat(args, w.stepper_args());
    args.insert(args.end(), w.args.begin(), w.args.end());
    h.process = std::make_unique<Child>(args, 300);
    EXPECT_TRUE(wait_until_listening(h.api, *h.process)) << h.process->err();
    return h;
  }
  // A source whose migration failed (paused, as these cases start it) runs on: resumed, it
  // finishes as the uninterrupted run did.
  static void expect_it_runs_on(Hop& source, const Baseline& b) {
    EXPECT_EQ(ctl(source.api, "vm.resume").status, 0);
    const Result left = source.process->wait();
    EXPECT_EQ(left.status, 0) << left.err;
    EXPECT_EQ(left.out, b.result.out);
  }
  // What the two processes of a failed step said, and what is in the socket directory.
  static std::string diagnose(const Hop& from, const Hop& to) {
    std::string out = "\n--- source stderr\n" + from.process->err() + "--- destination stderr\n" +
                      to.process->err() + "--- sockets\n";
    for (const auto& e :
         std::filesystem::directory_iterator(std::filesystem::path(from.api).parent_path()))
      out += e.path().filename().string() + "\n";
    return out;
  }
  // (The source's API listens: it may have paused itself before its API server started.)
  static Result migrate(const Hop& from, const Hop& to) {
    EXPECT_TRUE(wait_until_listening(from.api, *from.process)) << from.process->err();
    return ctl(from.api, "vm.send-migration",
               R"({"destination_url":"unix:)" + to.incoming + R"("})");
  }

  // One run migrated five times, from process to process, at five points spread over it (10,
  // 25, 40, 55 and 70 % of the instructions it counts): the pieces add up to the baseline. Each
  // hop pauses itself at its point; the next destination carries the next point.
  void check_migrations(const Workload& w, const std::string& name) {
    const Baseline b = baseline(w, name);
    ASSERT_EQ(b.result.status, 0) << b.result.out << b.result.err;
    ASSERT_GT(b.counted, 1000u) << b.result.err;
    std::vector<uint64_t> points;
    for (int i = 1; i <= 5; ++i) points.push_back(b.at(0.1 + 0.15 * (i - 1)));
    std::vector<Hop> hops(1);
    for (int i = 1; i <= 5; ++i) {
      std::vector<std::string> extra = w.symbols();
      if (i < 5) extra = concat(extra, pause_at(points[i]));
      hops.push_back(start_destination(name + "." + std::to_string(i), extra));
    }
    hops[0] = start_source(w, name + ".0", /*paused=*/false, pause_at(points[0]));
    for (int i = 1; i <= 5; ++i) {
      ASSERT_TRUE(paused_at_its_point(*hops[i - 1].process)) << "migration " << i;
      const Result c = migrate(hops[i - 1], hops[i]);
      ASSERT_EQ(c.status, 0) << "migration " << i << ": " << c.out << c.err
                             << diagnose(hops[i - 1], hops[i]);
      const Result left = hops[i - 1].process->wait();
      EXPECT_EQ(left.status, 0) << "a source ends with 0 after the hand-over: " << left.err;
      // lwp_demo prints only at the end of each phase: a hop may print nothing, but each one
      // ran profiled code (LWP records) or printed (NetBurst).
      EXPECT_TRUE(!left.out.empty() || !slurp(hops[i - 1].trace).empty())
          << "hop " << i - 1 << " did nothing";
    }
    std::string out, trace;
    for (size_t i = 0; i < hops.size(); ++i) {
      const Result r = hops[i].process->wait();
      out += r.out;
      trace += slurp(hops[i].trace);
      if (i + 1 == hops.size()) {
        EXPECT_EQ(r.status, b.result.status) << r.err;
      }
    }
    EXPECT_EQ(out, b.result.out);
    EXPECT_EQ(trace, b.trace);
  }

  // Paused at `fraction` of the run (of its counted instructions), snapshotted, resumed; the
  // source finishes as if nothing happened, and the snapshot restored finishes the run again
  // from the pause point.
  void check_snapshot(const Workload& w, const std::string& name, double fraction) {
    const Baseline b = baseline(w, name);
    ASSERT_EQ(b.result.status, 0) << b.result.err;
    const std::string api = socket_path(name + ".snap.api"), trace1 = temp(name + ".snap.trace");
    const std::string dir = temp(name + ".snapshot");
    std::filesystem::remove_all(dir);
    std::vector<std::string> sargs = {"run", "--api-socket", api,   "--lwp-report",
                                      "-",   "--lwp-trace",  trace1};
    for (const std::string& a : pause_at(b.at(fraction))) sargs.push_back(a);
    sargs = concat(sargs, w.stepper_args());
    sargs.insert(sargs.end(), w.args.begin(), w.args.end());
    Child source(sargs, 300);
    ASSERT_TRUE(paused_at_its_point(source));
    ASSERT_TRUE(wait_until_listening(api, source)) << source.err();
    const Result snap = ctl(api, "vm.snapshot", R"({"destination_url":"file://)" + dir + R"("})");
    ASSERT_EQ(snap.status, 0) << snap.out << snap.err;
    // The snapshot's pause flushed the console and the trace: everything up to the pause point.
    const std::string printed = source.out(), traced = slurp(trace1);
    ASSERT_EQ(ctl(api, "vm.resume").status, 0);
    const Result original = source.wait();
    EXPECT_EQ(original.status, b.result.status);
    EXPECT_EQ(original.out, b.result.out) << "a snapshot must not disturb the source";

    const std::string trace2 = temp(name + ".restored.trace");
    const Result restored = run(
        concat({"restore", "--source", "file://" + dir, "--lwp-report", "-", "--lwp-trace", trace2},
               w.symbols()),
        300);
    EXPECT_EQ(restored.status, b.result.status) << restored.err;
    EXPECT_EQ(printed + restored.out, b.result.out) << "restored:\n"
                                                    << restored.out << restored.err;
    EXPECT_EQ(traced + slurp(trace2), b.trace);
    EXPECT_NE(printed, "");
  }
};

// lwp_demo: instructions, branches (predictor) and DCache misses (cache model), with 4 random
// bits per reload (the PRNG): everything the snapshot must carry shows in the records.
const Workload kLwp{{"--cpu", "amd-lwp", "--seed", "7", "--", guest_program("lwp_demo"), "1", "4"}};
// NetBurst sampling: a PMI every 997 user instructions for the whole run, counts printed every 16
// rounds (160 rounds: each hop between the five migrations prints).
const Workload kNetburst{
    {"--cpu", "intel-netburst", "--", guest_program("netburst_sampler"), "160", "997"}};

// The NetBurst program with its user code in the embedded TCG between PMIs (--stepper emulate):
// nothing of the emulator is in the state, every pause lands between instructions with the
// registers in KVM.
const Workload kNetburstEmulated{kNetburst.args, "emulate"};

TEST_F(MigrationTest, LwpProgramMigratedFiveTimesIsByteIdentical) { check_migrations(kLwp, "lwp"); }

TEST_F(MigrationTest, EmulatedNetburstProgramMigratedFiveTimesIsByteIdentical) {
  check_migrations(kNetburstEmulated, "netburst-emulate");
}

TEST_F(MigrationTest, EmulatedNetburstProgramSnapshottedAndRestoredIsByteIdentical) {
  check_snapshot(kNetburstEmulated, "netburst-emulate", 0.5);
}

TEST_F(MigrationTest, NetburstProgramMigratedFiveTimesIsByteIdentical) {
  check_migrations(kNetburst, "netburst");
}

TEST_F(MigrationTest, LwpProgramSnapshottedAndRestoredIsByteIdentical) {
  check_snapshot(kLwp, "lwp", 0.4);
}

TEST_F(MigrationTest, NetburstProgramSnapshottedAndRestoredIsByteIdentical) {
  check_snapshot(kNetburst, "netburst", 0.5);
}

// Every ordered pair of shipped profiles, and the computed baseline of the LWP ones, gets the
// verdict migration_refusals() predicts (DESIGN §4.10): an accepted VM finishes at the destination
// with the output of an uninterrupted run; a refused one is refused before anything moves, the
// destination names every reason, and the source runs on. Sources start paused (a `ctl` call
// takes seconds in the nested host; the guest would finish first). One source per profile meets
// every destination that refuses it, in turn, and then runs to its normal end; each accepting
// destination gets a source of its own. (Migration in the middle of a run: the cases above.)
TEST_F(MigrationTest, EveryProfilePairGetsThePredictedVerdict) {
  const std::string baseline_file = temp("baseline-profile.json");
  {
    const Result r = run({"profiles", "--baseline", "amd-lwp", "amd-lwp-lite"});
    ASSERT_EQ(r.status, 0) << r.err;
    std::ofstream(baseline_file) << r.out;
  }
  std::vector<std::pair<std::string, vmm::CpuProfile>> profiles;
  for (const std::string& name : vmm::builtin_profile_names())
    profiles.emplace_back(name, *vmm::builtin_profile(name));
  vmm::Result<vmm::CpuProfile> computed = vmm::load_profile_file(baseline_file);
  ASSERT_TRUE(computed.ok()) << computed.error().message;
  profiles.emplace_back(baseline_file, *computed);
  ASSERT_EQ(profiles.size(), 6u);

  int accepted = 0, refused = 0;
  for (size_t f = 0; f < profiles.size(); ++f) {
    const auto& [from, from_profile] = profiles[f];
    const Workload w{{"--cpu", from, "--", guest_program("spin"), "pair", "4", "3000000"}};
    const Baseline b = baseline(w, "spin." + std::to_string(f));
    ASSERT_EQ(b.result.status, 0) << b.result.err;

    Hop refused_source = start_source(w, "pair.refused", /*paused=*/true);
    for (const auto& [to, to_profile] : profiles) {
      SCOPED_TRACE("from " + from + " to " + to);
      const std::vector<std::string> reasons = vmm::migration_refusals(from_profile, to_profile);
      if (reasons.empty()) {
        ++accepted;
        Hop source = start_source(w, "pair.src", /*paused=*/true);
        Hop destination = start_destination("pair.dst", {"--cpu", to});
        const Result c = migrate(source, destination);
        EXPECT_EQ(c.status, 0) << c.out << c.err << diagnose(source, destination);
        const Result left = source.process->wait();
        const Result arrived = destination.process->wait();
        EXPECT_EQ(left.status, 0);
        EXPECT_EQ(left.out + arrived.out, b.result.out) << arrived.err;
        EXPECT_EQ(arrived.status, 0);
        continue;
      }
      ++refused;
      Hop destination = start_destination("pair.dst", {"--cpu", to});
      const Result c = migrate(refused_source, destination);
      const std::string state = diagnose(refused_source, destination);
      const Result arrived = destination.process->wait();
      EXPECT_EQ(c.status, 1) << c.out << c.err << state;
      EXPECT_NE(c.out.find("the destination refused the VM"), std::string::npos) << c.out;
      EXPECT_EQ(arrived.status, 2);
      EXPECT_EQ(arrived.out, "") << "a refused VM never runs";
      for (const std::string& reason : reasons)
        EXPECT_NE(arrived.err.find(reason), std::string::npos) << reason << "\n" << arrived.err;
      EXPECT_FALSE(refused_source.process->ended()) << "the source runs on";
    }
    // Refused by every destination that had to refuse it, the source finishes normally.
    EXPECT_EQ(ctl(refused_source.api, "vm.resume").status, 0);
    const Result left = refused_source.process->wait();
    EXPECT_EQ(left.status, 0) << left.err;
    EXPECT_EQ(left.out, b.result.out) << "the source runs on to its normal end";
  }
  // Both verdicts occur: same-profile migrations and a baseline's members accept.
  EXPECT_GE(accepted, 5);
  EXPECT_GE(refused, 5);
}

// Two vCPUs, two tasks: the VM migrates and finishes there. Which vCPU runs which task, and so
// which task's line comes first, depends on two vCPUs racing, so the lines are compared as a set
// and the workload is one whose output does not depend on the vCPU: lwp_demo profiles
// instructions retired only (amd-lwp-lite) with no random bits, so neither a vCPU's cache model
// nor its PRNG shows in its records; only the CoreId it prints (the APIC ID) is masked.
TEST_F(MigrationTest, TwoVcpuGuestMigrates) {
  const Workload w{{"--vcpus", "2", "--cpu", "amd-lwp-lite", "--seed", "3", "--",
                    guest_program("lwp_demo"), "1", "0", "--", guest_program("spin"), "two", "6",
                    "3000000"}};
  const Baseline b = baseline(w, "two-vcpus");
  ASSERT_EQ(b.result.status, 0) << b.result.err;
  ASSERT_GT(b.counted, 1000u) << b.result.err;
  Hop destination = start_destination("two.dst", w.symbols());
  Hop source = start_source(w, "two.src", /*paused=*/false, pause_at(b.at(0.4)));
  ASSERT_TRUE(paused_at_its_point(*source.process));
  const Result c = migrate(source, destination);
  ASSERT_EQ(c.status, 0) << c.out << c.err << diagnose(source, destination);
  const Result left = source.process->wait();
  const Result arrived = destination.process->wait();
  EXPECT_EQ(left.status, 0) << left.err;
  EXPECT_EQ(arrived.status, b.result.status) << arrived.err;
  auto lines = [](const std::string& text) {
    std::multiset<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (const size_t core = line.find(" core "); core != std::string::npos)
        line = line.substr(0, core) + " core (masked)";
      out.insert(line);
    }
    return out;
  };
  EXPECT_EQ(lines(left.out + arrived.out), lines(b.result.out));
  EXPECT_NE(left.out, "");
  EXPECT_NE(arrived.out, "");
}

// A snapshot of a short run taken before it starts (--paused: a `ctl` call takes seconds in the
// nested host), for the refusal cases below.
std::string snapshot_of_spin(const std::string& name) {
  const std::string api = socket_path(name + ".api");
  const std::string dir = temp_path(name);
  std::filesystem::remove_all(dir);
  // 64 MiB: the case copies the snapshot seven times (TEST_TMPDIR is 9p in the nested host).
  Child source({"run", "--paused", "--mem", "64", "--api-socket", api, "--", guest_program("spin"),
                "s", "4", "3000000"},
               120);
  EXPECT_TRUE(wait_until_listening(api, source));
  EXPECT_EQ(ctl(api, "vm.snapshot", R"({"destination_url":"file://)" + dir + R"("})").status, 0);
  EXPECT_EQ(ctl(api, "vm.shutdown").status, 0);
  EXPECT_EQ(source.wait().status, 0);
  return dir;
}

// Every damaged snapshot is refused with status 2 and its reason, before the guest runs.
TEST_F(MigrationTest, DamagedSnapshotsAreRefusedWithTheirReason) {
  const std::string good = snapshot_of_spin("good-snapshot");
  {
    const Result r = run({"restore", "--source", "file://" + good});
    EXPECT_EQ(r.status, 0) << "the undamaged snapshot restores: " << r.err;
    EXPECT_NE(r.out.find("s round 4"), std::string::npos) << r.out;
  }
  std::smatch written;
  const std::string good_manifest = slurp(good + "/manifest.json");
  ASSERT_TRUE(std::regex_search(good_manifest, written, std::regex("\"version\": ([0-9]+)")))
      << good_manifest;
  const std::string current_version = written[1];
  struct Damage {
    std::string name, expected;
    std::function<void(const std::string& dir)> apply;
  };
  const std::vector<Damage> damages = {
      {"memory", "memory.bin fails its checksum (corrupted)",
       [](const std::string& d) { pmuvm_test::flip_byte(d + "/memory.bin", 0x100000 + 17); }},
      {"state", "state.bin fails its checksum (corrupted)",
       [](const std::string& d) { pmuvm_test::flip_byte(d + "/state.bin", 40); }},
      {"truncated-memory", "memory.bin is 1048576 bytes, the manifest says",
       [](const std::string& d) { std::filesystem::resize_file(d + "/memory.bin", 1 << 20); }},
      {"truncated-state", "state.bin is 100 bytes, the manifest says",
       [](const std::string& d) { std::filesystem::resize_file(d + "/state.bin", 100); }},
      // The version this pmuvm writes (and reads) is the one the undamaged manifest names.
      {"version", "snapshot format version 99 (this pmuvm reads version " + current_version + ")",
       [](const std::string& d) {
         std::string m = slurp(d + "/manifest.json");
         const std::regex version("\"version\": [0-9]+");
         m = std::regex_replace(m, version, "\"version\": 99",
                                std::regex_constants::format_first_only);
         std::ofstream(d + "/manifest.json") << m;
       }},
      {"foreign", "not a pmuvm snapshot",
       [](const std::string& d) {
         std::ofstream(d + "/manifest.json") << R"({"format": "qemu-migration", "version": 1})";
       }},
      {"missing", "cannot read its manifest.json",
       [](const std::string& d) { std::filesystem::remove(d + "/manifest.json"); }},
  };
  for (const Damage& damage : damages) {
    SCOPED_TRACE(damage.name);
    const std::string dir = temp("damaged-" + damage.name);
    std::filesystem::remove_all(dir);
    std::filesystem::copy(good, dir);
    damage.apply(dir);
    const Result r = run({"restore", "--source", "file://" + dir});
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find(damage.expected), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "") << "nothing may run";
  }
}

// Rewrites section `name` of the snapshot in `dir` with `edit` and makes the snapshot whole
// again: the section's CRC (StateSections::serialize) and state.bin's size and XXH64 in the
// manifest are recomputed, as anyone crafting one can. Only pmuvm's own checks stand in the way.
void craft_state_section(const std::string& dir, const std::string& name,
                         const std::function<void(std::vector<std::byte>&)>& edit) {
  const std::string state_text = slurp(dir + "/state.bin");
  const std::span<const std::byte> state(reinterpret_cast<const std::byte*>(state_text.data()),
                                         state_text.size());
  auto parsed = vmm::StateSections::parse(state);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  vmm::StateSections crafted;
  for (auto [section, bytes] : parsed.value().all()) {
    if (section == name) edit(bytes);
    crafted.add(section, std::move(bytes));
  }
  const std::vector<std::byte> out = crafted.serialize();
  std::ofstream(dir + "/state.bin", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
  std::string m = slurp(dir + "/manifest.json");
  const std::regex entry("(\"state.bin\": \\{\\s*\"bytes\": )[0-9]+(,\\s*\"xxh64\": \")[0-9a-f]+");
  std::smatch found;
  ASSERT_TRUE(std::regex_search(m, found, entry)) << m;
  m = found.prefix().str() + found[1].str() + std::to_string(out.size()) + found[2].str() +
      vmm::checksum_text(vmm::FileChecksum::of(out)) + found.suffix().str();
  std::ofstream(dir + "/manifest.json", std::ios::trunc) << m;
}

// vcpuN.interrupt_limit as pmu::RateLimitedInterruptSink archives it (version 1): held NMI,
// held PMI, held vectors, delivered, throttled, coalesced.
std::vector<std::byte> component_section(uint16_t version, std::vector<std::byte> archive) {
  vmm::StateSections one;
  one.add_component("x", version, std::move(archive));
  return *one.find("x");
}

std::vector<std::byte> interrupt_limit_section(bool pmi, std::vector<uint8_t> vectors) {
  pmu::StateWriter w;
  bool nmi = false;
  uint64_t delivered = 0, throttled = 0, coalesced = 0;
  w(nmi, pmi, vectors, delivered, throttled, coalesced);
  return component_section(1, w.take());
}

// devices.console: the console's current line, a std::string.
std::vector<std::byte> console_section(std::string line) {
  pmu::StateWriter w;
  w(line);
  return component_section(vmm::kConsoleLineStateVersion, w.take());
}

// A snapshot whose sections were rewritten (CRCs and checksums made good again) is refused with
// status 2 and its reason when what it holds is not a state this machine could have reached:
// the section's own rules (held vectors are interrupt vectors, each once) and what the CPU
// profile allows (amd-lwp has no NetBurst PMU to hold a PMI for).
TEST_F(MigrationTest, CraftedStateIsRefusedBeforeTheGuestRuns) {
  const std::string good = snapshot_of_spin("crafted-snapshot");
  struct Craft {
    std::string name, section_name, expected;
    std::vector<std::byte> section;
  };
  const std::string limit = "vcpu0.interrupt_limit";
  const std::vector<Craft> crafts = {
      {"exception-vector", limit, "held vector 0xe is an exception vector (below 16)",
       interrupt_limit_section(false, {0x0E})},
      {"vector-twice", limit, "vector 0xf0 is held twice",
       interrupt_limit_section(false, {0xF0, 0xF0})},
      {"pmi-without-netburst", limit,
       "vcpu0.interrupt_limit state holds a PMI, but CPU profile amd-lwp has no NetBurst or "
       "architectural PMU of pmuvm's",
       interrupt_limit_section(true, {})},
      {"console-line", "devices.console",
       "devices.console state is not one console line of at most 4096 bytes",
       console_section(std::string(5000, 'x'))},
      {"console-lines", "devices.console",
       "devices.console state is not one console line of at most 4096 bytes",
       console_section("kernel: two\nlines")},
  };
  for (const Craft& c : crafts) {
    SCOPED_TRACE(c.name);
    const std::string dir = temp("crafted-" + c.name);
    std::filesystem::remove_all(dir);
    std::filesystem::copy(good, dir);
    craft_state_section(dir, c.section_name,
                        [&](std::vector<std::byte>& bytes) { bytes = c.section; });
    const Result r = run({"restore", "--source", "file://" + dir});
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "") << "nothing may run";
  }
  // The same rewrite with what the source held (nothing) restores and runs: the crafting is
  // sound, only the contents are refused.
  const std::string dir = temp("crafted-nothing-held");
  std::filesystem::remove_all(dir);
  std::filesystem::copy(good, dir);
  craft_state_section(dir, "vcpu0.interrupt_limit", [](std::vector<std::byte>& bytes) {
    bytes = interrupt_limit_section(false, {});
  });
  const Result r = run({"restore", "--source", "file://" + dir});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("s round 4"), std::string::npos) << r.out;
}

using pmuvm_testing::connect_unix;
using pmuvm_testing::listen_unix;

// Garbage on the migration socket: the destination refuses it and ends with status 2. The socket
// is its owner's only (0600: whoever connects first hands the VM its whole state; it was 0755).
TEST_F(MigrationTest, GarbageOnTheMigrationSocketIsRefused) {
  Hop destination = start_destination("garbage.dst");
  struct stat st {};
  ASSERT_EQ(lstat(destination.incoming.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u) << std::oct << (st.st_mode & 07777);
  const int fd = connect_unix(destination.incoming);
  ASSERT_GE(fd, 0);
  const std::string garbage = "GET / HTTP/1.1\r\nHost: pmuvm\r\n\r\n" + std::string(4096, 'x');
  ASSERT_GT(write(fd, garbage.data(), garbage.size()), 0);
  const Result r = destination.process->wait();
  close(fd);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("not a pmuvm migration stream (bad frame magic)"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");
}

// A connection from another user (here one the test lets through by opening the socket's mode,
// which the destination makes 0600) is closed unread, and the destination goes on waiting for
// its own user's: the peer is checked (SO_PEERCRED), not only the file mode.
TEST_F(MigrationTest, AnotherUsersConnectionIsClosedAndTheDestinationWaitsOn) {
  Hop destination = start_destination("peer.dst");
  ASSERT_EQ(chmod(destination.incoming.c_str(), 0666), 0);
  const std::string dir = std::filesystem::path(destination.incoming).parent_path();
  struct stat dir_st {};
  ASSERT_EQ(stat(dir.c_str(), &dir_st), 0);
  ASSERT_EQ(chmod(dir.c_str(), 0711), 0);  // the test's private socket directory, for nobody
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // as nobody: connect, send nothing, expect the destination's close
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(10);
    const int fd = connect_unix(destination.incoming);
    if (fd < 0) _exit(11);
    char buf[64];
    const ssize_t n = read(fd, buf, sizeof buf);
    _exit(n == 0 ? 0 : 12);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  chmod(dir.c_str(), dir_st.st_mode & 07777);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: setuid, 11: connect, 12: not closed";
  // Still waiting: its own user's connection is the one it takes (garbage here: refused, exit 2).
  const int fd = connect_unix(destination.incoming);
  ASSERT_GE(fd, 0);
  const std::string garbage(64, 'x');  // more than a frame header
  ASSERT_GT(write(fd, garbage.data(), garbage.size()), 0);
  const Result r = destination.process->wait();
  close(fd);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("refused a connection from uid 65534"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not a pmuvm migration stream (bad frame magic)"), std::string::npos)
      << r.err;
}

// A destination that accepts the VM and then drops the connection in the middle of the pages:
// the migration fails, the source resumes and finishes exactly as without it.
TEST_F(MigrationTest, DroppedConnectionLeavesTheSourceRunning) {
  const Workload w{{"--cpu", "amd-lwp", "--", guest_program("spin"), "drop", "6", "3000000"}};
  const Baseline b = baseline(w, "spin.drop");
  ASSERT_EQ(b.result.status, 0) << b.result.err;
  const std::string path = socket_path("drop.mig");
  std::filesystem::remove(path);
  const int listener = listen_unix(path, 1);
  ASSERT_GE(listener, 0);
  std::thread fake([&] {
    const int fd = accept(listener, nullptr, nullptr);
    char buf[65536];
    ASSERT_GT(read(fd, buf, sizeof buf), 0);  // the hello
    // An accept frame: "PMIG", type 2, length 0, CRC-32 of nothing (0).
    const unsigned char accept_frame[20] = {'P', 'M', 'I', 'G', 2};
    ASSERT_EQ(send(fd, accept_frame, sizeof accept_frame, MSG_NOSIGNAL), 20);
    size_t got = 0;
    while (got < (1u << 20)) {  // a megabyte of pages, then gone
      const ssize_t n = read(fd, buf, sizeof buf);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    close(fd);
  });
  Hop source = start_source(w, "drop.src", /*paused=*/true);
  const Result c =
      ctl(source.api, "vm.send-migration", R"({"destination_url":"unix:)" + path + R"("})");
  fake.join();
  close(listener);
  EXPECT_EQ(c.status, 1) << c.out;
  EXPECT_NE(c.out.find("migration failed, the VM runs on here"), std::string::npos) << c.out;
  expect_it_runs_on(source, b);
}

// A destination whose --api-socket another process holds would lose the VM after the commit,
// when the source has let it go: it refuses the VM instead, naming why, and the source runs on.
TEST_F(MigrationTest, DestinationThatCannotServeItsApiSocketRefusesTheVm) {
  const Workload w{{"--cpu", "amd-lwp", "--", guest_program("spin"), "busy", "6", "3000000"}};
  const Baseline b = baseline(w, "spin.busy");
  ASSERT_EQ(b.result.status, 0) << b.result.err;
  const std::string taken = socket_path("busy.dst.api");  // start_destination's --api-socket
  std::filesystem::remove(taken);
  const int listener = listen_unix(taken, 4);
  ASSERT_GE(listener, 0);
  Hop destination = start_destination("busy.dst");
  Hop source = start_source(w, "busy.src", /*paused=*/true);
  const Result c = ctl(source.api, "vm.send-migration",
                       R"({"destination_url":"unix:)" + destination.incoming + R"("})");
  const Result d = destination.process->wait();
  EXPECT_EQ(d.status, 2) << d.err;
  EXPECT_NE(
      d.err.find("--api-socket: API socket " + taken + ": another process is listening on it"),
      std::string::npos)
      << d.err;
  EXPECT_EQ(c.status, 1) << c.out;
  EXPECT_NE(c.out.find("another process is listening on it"), std::string::npos) << c.out;
  expect_it_runs_on(source, b);
  close(listener);
  std::filesystem::remove(taken);
}

// A destination of another user (here one the test runs as nobody, listening where the source is
// sent) gets nothing of the VM: the source checks its peer's uid before the hello, says why, and
// its VM runs on (before, whoever listened at the path received all RAM and state).
TEST_F(MigrationTest, ADestinationOfAnotherUserGetsNothing) {
  const Workload w{{"--cpu", "amd-lwp", "--", guest_program("spin"), "other", "6", "3000000"}};
  const Baseline b = baseline(w, "spin.other");
  ASSERT_EQ(b.result.status, 0) << b.result.err;
  const std::string path = socket_path("other.mig");
  std::filesystem::remove(path);
  const std::string dir = std::filesystem::path(path).parent_path();
  struct stat dir_st {};
  ASSERT_EQ(stat(dir.c_str(), &dir_st), 0);
  ASSERT_EQ(chmod(dir.c_str(), 0777), 0);  // nobody may create its socket there
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // as nobody: listen, tell the test, take one connection, count its bytes
    close(ready[0]);
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(10);
    const int listener = listen_unix(path, 1);
    if (listener < 0) _exit(11);
    if (write(ready[1], "x", 1) != 1) _exit(12);
    const int fd = accept(listener, nullptr, nullptr);
    char buf[4096];
    size_t got = 0;
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) got += static_cast<size_t>(n);
    _exit(got == 0 ? 0 : 13);
  }
  close(ready[1]);
  char byte;
  ASSERT_EQ(read(ready[0], &byte, 1), 1) << "the nobody listener did not start";
  close(ready[0]);
  Hop source = start_source(w, "other.src", /*paused=*/true);
  const Result c =
      ctl(source.api, "vm.send-migration", R"({"destination_url":"unix:)" + path + R"("})");
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  chmod(dir.c_str(), dir_st.st_mode & 07777);
  std::filesystem::remove(path);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "10: setuid, 11: listen, 12: pipe, 13: the source sent something";
  EXPECT_EQ(c.status, 1) << c.out;
  EXPECT_NE(c.out.find("it runs as uid 65534, neither this user nor root (nothing of the VM was "
                       "sent)"),
            std::string::npos)
      << c.out;
  expect_it_runs_on(source, b);
}

// The peer chooses the machine's size; the destination chooses what it lends: a VM asking for
// more RAM than --max-mem is refused before anything is allocated, and the source runs on.
TEST_F(MigrationTest, ADestinationLendsNoMoreThanItsMaxMem) {
  const Workload w{{"--cpu", "amd-lwp", "--", guest_program("spin"), "lend", "6", "3000000"}};
  const Baseline b = baseline(w, "spin.lend");
  ASSERT_EQ(b.result.status, 0) << b.result.err;
  Hop destination = start_destination("lend.dst", {"--max-mem", "64", "--max-vcpus", "1"});
  Hop source = start_source(w, "lend.src", /*paused=*/true);
  const Result c = ctl(source.api, "vm.send-migration",
                       R"({"destination_url":"unix:)" + destination.incoming + R"("})");
  const Result d = destination.process->wait();
  EXPECT_EQ(d.status, 2) << d.err;
  const std::string why = "the VM asks for 256 MiB of RAM; this destination lends at most 64 MiB";
  EXPECT_NE(d.err.find(why), std::string::npos) << d.err;
  EXPECT_EQ(c.status, 1) << c.out;
  EXPECT_NE(c.out.find(why), std::string::npos) << c.out;
  expect_it_runs_on(source, b);
}

// Stands between a source and a destination (the test's man in the middle): forwards every frame
// both ways and lets the test act when a frame of a given type passes, at a point of the
// protocol rather than of time.
class MigrationProxy {
 public:
  using Hook = std::function<void(uint32_t type)>;
  MigrationProxy(const std::string& listen_path, const std::string& destination, Hook to_source)
      : listener_(listen_unix(listen_path, 1)), path_(listen_path) {
    EXPECT_GE(listener_, 0);
    thread_ = std::thread([this, destination, to_source] {
      const int src = accept(listener_, nullptr, nullptr);
      const int dst = connect_unix(destination);
      if (src < 0 || dst < 0) return;
      std::thread up([&] { forward(src, dst, [](uint32_t) {}); });
      forward(dst, src, to_source);
      up.join();
      close(src);
      close(dst);
    });
  }
  ~MigrationProxy() {
    thread_.join();
    close(listener_);
    unlink(path_.c_str());
  }

 private:
  static bool read_all(int fd, char* p, size_t n) {
    while (n > 0) {
      const ssize_t r = read(fd, p, n);
      if (r <= 0) return false;
      p += r;
      n -= static_cast<size_t>(r);
    }
    return true;
  }
  // Frames ("PMIG", u32 type, u64 length, bytes, u32 CRC) from `in` to `out` until `in` ends.
  static void forward(int in, int out, const Hook& hook) {
    std::vector<char> frame;
    for (;;) {
      char header[16];
      if (!read_all(in, header, sizeof header)) break;
      uint32_t type;
      uint64_t length;
      std::memcpy(&type, header + 4, 4);
      std::memcpy(&length, header + 8, 8);
      frame.assign(header, header + 16);
      frame.resize(16 + length + 4);
      if (!read_all(in, frame.data() + 16, length + 4)) break;
      hook(type);
      // MSG_NOSIGNAL: a side that went away ends the forwarding, not the test (SIGPIPE).
      if (send(out, frame.data(), frame.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(frame.size()))
        break;
    }
    shutdown(out, SHUT_WR);
  }
  int listener_;
  std::string path_;
  std::thread thread_;
};

// The destination's API socket path is taken by another process after the destination checked
// it (at the hello) and before it is bound: the destination binds it before it says ready, so it
// refuses the VM then, naming why, and the source runs on (before, it bound the socket after the
// commit, when the source had let go, and exited 3: the VM was lost).
TEST_F(MigrationTest, AnApiSocketTakenMidMigrationIsRefusedBeforeReady) {
  const Workload w{{"--cpu", "amd-lwp", "--", guest_program("spin"), "taken", "6", "3000000"}};
  const Baseline b = baseline(w, "spin.taken");
  ASSERT_EQ(b.result.status, 0) << b.result.err;
  Hop destination = start_destination("taken.dst");
  std::filesystem::remove(destination.api);
  int taker = -1;
  const std::string via = socket_path("taken.proxy");
  std::filesystem::remove(via);
  Hop source = start_source(w, "taken.src", /*paused=*/true);
  Result c;
  {
    MigrationProxy proxy(via, destination.incoming, [&](uint32_t type) {
      if (type == 2) taker = listen_unix(destination.api, 4);  // kAccept: checked, not bound
    });
    c = ctl(source.api, "vm.send-migration", R"({"destination_url":"unix:)" + via + R"("})");
  }
  ASSERT_GE(taker, 0);
  const Result d = destination.process->wait();
  EXPECT_EQ(d.status, 2) << d.err;
  EXPECT_NE(
      d.err.find("incoming migration failed before the VM ran: --api-socket " + destination.api),
      std::string::npos)
      << d.err;
  EXPECT_EQ(c.status, 1) << c.out;
  EXPECT_NE(c.out.find("the destination failed before it could run the VM: --api-socket"),
            std::string::npos)
      << c.out;
  expect_it_runs_on(source, b);
  close(taker);
  std::filesystem::remove(destination.api);
}

// A destination that drips its accept, a byte at a time: the source gives up at the deadline
// the request named and its VM runs on; meanwhile its API answers (state "migrating"). Before,
// the source waited as long as bytes kept coming, holding the API's one-call lock.
TEST_F(MigrationTest, ADestinationThatDripsItsAnswerIsGivenUpAtTheDeadline) {
  const Workload w{{"--cpu", "amd-lwp", "--", guest_program("spin"), "drip", "6", "3000000"}};
  const Baseline b = baseline(w, "spin.drip");
  ASSERT_EQ(b.result.status, 0) << b.result.err;
  const std::string path = socket_path("drip.mig");
  std::filesystem::remove(path);
  const int listener = listen_unix(path, 1);
  ASSERT_GE(listener, 0);
  std::promise<void> hello_read;
  std::atomic<bool> stop = false;
  std::thread drip([&] {
    const int fd = accept(listener, nullptr, nullptr);
    char buf[65536];
    if (read(fd, buf, sizeof buf) <= 0) ADD_FAILURE() << "no hello";
    hello_read.set_value();
    const unsigned char accept_frame[20] = {'P', 'M', 'I', 'G', 2};
    for (size_t i = 0; i < sizeof accept_frame && !stop; ++i) {
      // MSG_NOSIGNAL: the source gives up and closes while this drips (SIGPIPE killed the test).
      if (send(fd, accept_frame + i, 1, MSG_NOSIGNAL) != 1) break;
      usleep(400'000);  // the test's peer is slow on purpose; the source's deadline is 2 s
    }
    close(fd);
  });
  Hop source = start_source(w, "drip.src", /*paused=*/true);
  Result c;
  std::thread migrating([&] {
    c = ctl(source.api, "vm.send-migration",
            R"({"destination_url":"unix:)" + path + R"(","deadline_ms":2000})");
  });
  hello_read.get_future().wait();
  EXPECT_EQ(ctl(source.api, "vmm.ping").status, 0);
  const Result info = ctl(source.api, "vm.info");
  migrating.join();
  stop = true;
  drip.join();
  close(listener);
  EXPECT_NE(info.out.find(R"("state": "migrating")"), std::string::npos) << info.out;
  EXPECT_EQ(c.status, 1) << c.out;
  EXPECT_NE(c.out.find("the migration peer did not answer within 2 s"), std::string::npos) << c.out;
  expect_it_runs_on(source, b);
}

// SIGTERM while the source waits on a destination that says nothing: pmuvm ends at once with
// 128 + 15 (before, the signal waited for the stuck migration, which held the VM and the API).
TEST_F(MigrationTest, SigtermEndsASourceStuckInAMigration) {
  const Workload w{{"--cpu", "amd-lwp", "--", guest_program("spin"), "term", "6", "3000000"}};
  const std::string path = socket_path("term.mig");
  std::filesystem::remove(path);
  const int listener = listen_unix(path, 1);
  ASSERT_GE(listener, 0);
  std::promise<void> hello_read;
  std::thread silent([&] {
    const int fd = accept(listener, nullptr, nullptr);
    char buf[65536];
    if (read(fd, buf, sizeof buf) <= 0) ADD_FAILURE() << "no hello";
    hello_read.set_value();
    while (read(fd, buf, sizeof buf) > 0) {
    }
    close(fd);
  });
  Hop source = start_source(w, "term.src", /*paused=*/true);
  Result c;
  std::thread migrating([&] {
    c = ctl(source.api, "vm.send-migration", R"({"destination_url":"unix:)" + path + R"("})");
  });
  hello_read.get_future().wait();
  source.process->signal(SIGTERM);
  const Result left = source.process->wait();  // the Child's timeout is 300 s; this takes < 1 s
  migrating.join();
  silent.join();
  close(listener);
  EXPECT_EQ(left.status, 143) << left.err;
  EXPECT_NE(left.err.find("stopped by signal 15"), std::string::npos) << left.err;
}

}  // namespace
}  // namespace pmuvm_e2e
