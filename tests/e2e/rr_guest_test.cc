// rr, the record/replay debugger, inside a Linux guest on pmuvm's Intel architectural PMU
// (DESIGN §4.13, issue 41): Debian's rr 5.6 recognises the intel-skylake profile as Skylake,
// counts its ticks (BR_INST_RETIRED.CONDITIONAL, r5101c4, user only) on the model and takes
// overflow interrupts from it, and `rr replay -a` replays what `rr record` recorded: a static
// loop, and rr_subject (guest/linux/rr_subject.c), dynamically linked, whose time, random bytes,
// TSC, the iteration at which three SIGALRMs arrived and how far a second thread counted before
// the first stopped it differ from run to run, so replay prints the recording's lines only if rr
// delivered each signal at the recorded tick and scheduled the threads as recorded. (rr refuses to
// record without a PMU, and KVM gives a guest none on a host without one.) One boot under the KVM
// stepper with block steps (guest/linux/rr_checks), and rr_subject again with one exit per
// instruction (kvm-single) and under the host backend, whose counter double overflows 100
// instructions late as Intel's PMUs may; runs on a KVM host (tests/kvm_host_test.bzl).
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "tests/e2e/guest_test.h"

namespace {

using pmuvm_e2e::Result;
using pmuvm_e2e::run;
using pmuvm_e2e::runfile;

class RrGuest : public pmuvm_e2e::GuestTest {
 protected:
  static Result boot_with(const std::vector<std::string>& counting, const std::string& programs) {
    std::vector<std::string> args = {"run", "--stats", "--cpu", "intel-skylake"};
    args.insert(args.end(), counting.begin(), counting.end());
    for (const std::string& a :
         {std::string("--mem"), std::string("512"), std::string("--kernel"),
          runfile("guest_kernel_patches/bzImage"), std::string("--initrd"),
          runfile("guest/linux/initramfs_perf.cpio"), std::string("--cmdline"),
          "console=ttyS0 nmi_watchdog=0 -- " + programs})
      args.push_back(a);
    return run(args, 900);
  }
  static constexpr const char* kRecordAndReplaySubject =
      "rr record -o /rr-subject /bin/rr_subject , rr replay -a /rr-subject";
  static const Result& boot() {
    static const Result r = boot_with({"--stepper", "kvm"}, "@rr_checks");
    return r;
  }
  static const Result& single_stepped() {
    static const Result r = boot_with({"--stepper", "kvm-single"}, kRecordAndReplaySubject);
    return r;
  }
  static const Result& host_backend() {
    static const Result r =
        boot_with({"--backend", "host", "--host-counters", "double", "--double-skid", "100"},
                  kRecordAndReplaySubject);
    return r;
  }
};

// Each of the four commands (record, replay, record, replay) exits 0: rr found a PMU it accepts
// (no "rr needs a working PMU" or unknown-CPU refusal) and no replay diverged.
TEST_F(RrGuest, RecordsAndReplaysWithoutError) {
  const Result& r = boot();
  EXPECT_EQ(r.status, 0) << dump(r);
  EXPECT_EQ(pmuvm_e2e::occurrences(r.out, "init: rr exited 0"), 4u) << dump(r);
  EXPECT_NE(r.out.find("rr: Saving execution to trace directory `/rr-loop'."), std::string::npos)
      << dump(r);
  EXPECT_NE(r.out.find("rr: Saving execution to trace directory `/rr-subject'."), std::string::npos)
      << dump(r);
  EXPECT_EQ(r.out.find("FATAL"), std::string::npos) << dump(r);
}

// The replay prints exactly the recording's lines, including the values that differ from run to
// run, the iterations at which the asynchronous signals came and the second thread's count.
TEST_F(RrGuest, ReplayPrintsWhatTheRecordingPrinted) {
  for (const Result* each : {&boot(), &single_stepped(), &host_backend()}) {
    const Result& r = *each;
    SCOPED_TRACE(&r == &boot() ? "kvm" : &r == &single_stepped() ? "kvm-single" : "host");
    EXPECT_EQ(r.status, 0) << dump(r);
    const std::string both = lines(r, "rr_subject:");
    static const std::regex recorded(
        "rr_subject: pid \\d+, time \\d+\\.\\d{9}, random [0-9a-f]{16}, tsc \\d+\n"
        "rr_subject: round 1: SIGALRM after \\d+ iterations \\(mix [0-9a-f]+\\)\n"
        "rr_subject: round 2: SIGALRM after \\d+ iterations \\(mix [0-9a-f]+\\)\n"
        "rr_subject: round 3: SIGALRM after \\d+ iterations \\(mix [0-9a-f]+\\)\n"
        "rr_subject: thread: counted \\d+ before it was stopped\n");
    ASSERT_EQ(both.size() % 2, 0u) << dump(r);
    const std::string record = both.substr(0, both.size() / 2);
    const std::string replay = both.substr(both.size() / 2);
    EXPECT_TRUE(std::regex_match(record, recorded)) << dump(r);
    EXPECT_EQ(replay, record) << dump(r);
  }
}

// Under the host backend rr's ticks (conditional branches) are counted by the host counters:
// the guest runs unseen between their overflows, all but the margin before each overflow and
// what nothing counts, and no overflow comes past the margin.
TEST_F(RrGuest, TicksRunUnseenUnderTheHostBackend) {
  const Result& r = host_backend();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.err, m,
      std::regex("host backend: free runs \\d+, ended by overflow (\\d+), unseen instructions "
                 "(\\d+), overshoots (\\d+), exits with a host PMU \\d+ \\(([0-9.]+) per")))
      << dump(r);
  EXPECT_GE(std::stoull(m[1]), 1u) << "rr's tick interrupts";
  EXPECT_GT(std::stoull(m[2]), 100000u) << dump(r);
  EXPECT_EQ(m[3], "0") << dump(r);
  EXPECT_LT(std::stod(m[4]), 0.2) << "exits per counted instruction: " << dump(r);
}

}  // namespace
