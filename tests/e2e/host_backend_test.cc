// The host backend (DESIGN §4.11, issue 23) end to end, through the counter double (these
// machines have no PMU): between event boundaries the guest runs unseen while the double counts,
// its overflow comes a chosen skid late, and the KVM stepper steps the rest up to each event.
// Records, PMIs and output must be the precise backend's byte for byte for every skid up to the
// margin; a skid past it is reported, the one late event is the only difference, and the vCPU
// falls back to stepping. Runs on a KVM host (tests/kvm_host_test.bzl).
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "tests/e2e/guest_test.h"

namespace {

using pmuvm_e2e::Result;
using pmuvm_e2e::run;
using pmuvm_e2e::slurp;

class HostBackend : public pmuvm_e2e::GuestTest {
 protected:
  static std::vector<std::string> with_double(uint64_t skid, const std::string& margin = "") {
    std::vector<std::string> args = {"--backend", "host",          "--host-counters",
                                     "double",    "--double-skid", std::to_string(skid)};
    if (!margin.empty()) args.insert(args.end(), {"--skid-margin", margin});
    return args;
  }
  // `run CPU [backend args] --stats --lwp-trace FILE -- program...`
  static Result run_program(const std::string& cpu, const std::vector<std::string>& backend,
                            const std::string& trace, const std::vector<std::string>& program) {
    std::vector<std::string> args = {"run", "--cpu", cpu, "--stats", "--lwp-trace", trace};
    args.insert(args.end(), backend.begin(), backend.end());
    args.push_back("--");
    args.insert(args.end(), program.begin(), program.end());
    return run(args, 600);
  }
  struct HostLine {
    uint64_t free_runs = 0, overflows = 0, unseen = 0, overshoots = 0, pmu_exits = 0;
    bool found = false;
  };
  // --stats' "host backend" line of vCPU 0.
  static HostLine host_line(const Result& r) {
    static const std::regex line(
        "pmuvm: vcpu0: host backend: free runs (\\d+), ended by overflow (\\d+), unseen "
        "instructions (\\d+), overshoots (\\d+), exits with a host PMU (\\d+)");
    std::smatch m;
    HostLine h;
    if (!std::regex_search(r.err, m, line)) return h;
    h = {std::stoull(m[1]), std::stoull(m[2]), std::stoull(m[3]),
         std::stoull(m[4]), std::stoull(m[5]), true};
    return h;
  }
  // Writes `text` to this test's scratch file `name`; returns its path.
  static std::string scratch_file(const std::string& name, const std::string& text) {
    const std::string path = temp(name);
    std::ofstream(path) << text;
    return path;
  }
  static uint64_t counted(const Result& r) {
    static const std::regex line("pmuvm: vcpu0: exits \\d+, .* counted instructions (\\d+)");
    std::smatch m;
    return std::regex_search(r.err, m, line) ? std::stoull(m[1]) : 0;
  }
};

// LWP instructions retired (amd-lwp-lite offers only that event): lwp_demo's 58 records every
// 4096 instructions.
TEST_F(HostBackend, LwpRecordsAreThePreciseBackendsForEverySkidUpToTheMargin) {
  const std::string precise_trace = temp("lwp_demo.precise.jsonl");
  const Result precise =
      run_program("amd-lwp-lite", {"--backend", "precise"}, precise_trace, {program("lwp_demo")});
  ASSERT_EQ(precise.status, 0) << dump(precise);
  const std::string expected = slurp(precise_trace);
  ASSERT_GT(std::count(expected.begin(), expected.end(), '\n'), 50) << expected;
  for (uint64_t skid : {0u, 1u, 64u, 128u}) {
    SCOPED_TRACE("skid " + std::to_string(skid));
    const std::string trace = temp("lwp_demo.double" + std::to_string(skid) + ".jsonl");
    const Result r = run_program("amd-lwp-lite", with_double(skid), trace, {program("lwp_demo")});
    ASSERT_EQ(r.status, 0) << dump(r);
    EXPECT_EQ(slurp(trace), expected);
    EXPECT_EQ(lines(r, "lwp_demo:"), lines(precise, "lwp_demo:"));
    EXPECT_EQ(counted(r), counted(precise));
    const HostLine h = host_line(r);
    ASSERT_TRUE(h.found) << dump(r);
    EXPECT_EQ(h.overshoots, 0u);
    EXPECT_GE(h.overflows, 50u) << "about one overflow per record";
    // Everything but the margin before each record runs unseen.
    EXPECT_GT(h.unseen, counted(r) * 9 / 10) << dump(r);
    EXPECT_EQ(r.err.find("past an event boundary"), std::string::npos) << r.err;
  }
}

TEST_F(HostBackend, ASkidPastTheMarginIsReportedAndFallsBackToStepping) {
  const std::string precise_trace = temp("lwp_demo.precise2.jsonl");
  const Result precise =
      run_program("amd-lwp-lite", {"--backend", "precise"}, precise_trace, {program("lwp_demo")});
  ASSERT_EQ(precise.status, 0) << dump(precise);
  const std::string trace = temp("lwp_demo.late.jsonl");
  const Result r = run_program("amd-lwp-lite", with_double(300), trace, {program("lwp_demo")});
  ASSERT_EQ(r.status, 0) << dump(r);
  EXPECT_NE(r.err.find("vCPU 0: the host counters' overflow came 172 instruction(s) past an "
                       "event boundary (a skid beyond the margin of 128)"),
            std::string::npos)
      << r.err;
  const HostLine h = host_line(r);
  EXPECT_EQ(h.overshoots, 1u);
  EXPECT_EQ(h.overflows, 1u) << "no free run after the fall-back";
  // The first record came 172 instructions late; every later one is on the precise grid again.
  const std::string expected = slurp(precise_trace), got = slurp(trace);
  const size_t first_line = expected.find('\n') + 1;
  ASSERT_EQ(got.find('\n') + 1, first_line);
  EXPECT_NE(got.substr(0, first_line), expected.substr(0, first_line));
  EXPECT_EQ(got.substr(first_line), expected.substr(first_line));
  EXPECT_EQ(counted(r), counted(precise));
}

// LWP branches retired where the profile's LWP captures no branch prediction (lwp
// branch_prediction false: PRD valid 0 in every record, which the proposal allows): a
// retired-branch host counter counts them between records, and the records are the precise
// backend's for every skid up to the margin.
TEST_F(HostBackend, LwpBranchRecordsWithoutPredictionAreThePreciseBackends) {
  const std::string profile = scratch_file("lwp-branches.json", R"({
  "name": "lwp-branches", "description": "instructions and branches, no prediction captured",
  "vendor": "AuthenticAMD", "family": "0x15", "model": "0x10", "stepping": 1,
  "max_basic_leaf": "0xD", "max_extended_leaf": "0x8000001E",
  "features": ["fpu", "tsc", "msr", "pae", "cx8", "apic", "sep", "pge", "cmov", "pat", "clfsh",
               "mmx", "fxsr", "sse", "sse2", "syscall", "nx", "lm"],
  "address_sizes": {"physical": 48, "linear": 48},
  "lwp": {"events": ["IRE", "BRE"], "max_events": 2, "branch_prediction": false},
  "cache": {"l1d": {"size_kib": 16, "ways": 4, "latency_cycles": 4},
            "l2": {"size_kib": 1024, "ways": 16, "latency_cycles": 20},
            "dram_latency_cycles": 220}
})");
  const std::string precise_trace = temp("lwp_branches.precise.jsonl");
  const Result precise =
      run_program(profile, {"--backend", "precise"}, precise_trace, {program("lwp_demo")});
  ASSERT_EQ(precise.status, 0) << dump(precise);
  const std::string expected = slurp(precise_trace);
  ASSERT_NE(expected.find("\"event\":2"), std::string::npos) << expected;
  // The trace's flags are the record's bits 31:16: PRD valid (bit 29) is 0x2000 there.
  const std::regex flags("\"flags\":(\\d+)");
  for (std::sregex_iterator it(expected.begin(), expected.end(), flags), end; it != end; ++it)
    EXPECT_EQ(std::stoul((*it)[1]) & 0x2000, 0u) << "no record has PRD valid: " << it->str();
  for (uint64_t skid : {0u, 128u}) {
    SCOPED_TRACE("skid " + std::to_string(skid));
    const std::string trace = temp("lwp_branches.double" + std::to_string(skid) + ".jsonl");
    const Result r = run_program(profile, with_double(skid), trace, {program("lwp_demo")});
    ASSERT_EQ(r.status, 0) << dump(r);
    EXPECT_EQ(slurp(trace), expected);
    const HostLine h = host_line(r);
    ASSERT_TRUE(h.found) << dump(r);
    EXPECT_EQ(h.overshoots, 0u);
    EXPECT_GT(h.unseen, counted(r) * 3 / 4) << dump(r);
  }
}

// NetBurst instr_retired at T0_USR with overflow PMIs (the kernel's handler reloads -PERIOD):
// the PMIs come at the same instructions, so the program's counts and PMI numbers are the same.
TEST_F(HostBackend, NetburstPmisAreThePreciseBackendsForEverySkidUpToTheMargin) {
  const std::vector<std::vector<std::string>> programs = {
      {program("netburst_sampler"), "400", "1000"},
      {program("netburst_exact"), "instr", "1", "usr", "300"},
  };
  for (const std::vector<std::string>& p : programs) {
    const std::string name = p[0].substr(p[0].rfind('/') + 1);
    const Result precise =
        run_program("intel-netburst", {"--backend", "precise"}, temp(name + ".jsonl"), p);
    ASSERT_EQ(precise.status, 0) << dump(precise);
    const std::string expected = lines(precise, name + ":");
    ASSERT_NE(expected.find("pmis"), std::string::npos) << dump(precise);
    for (uint64_t skid : {0u, 1u, 16u}) {
      SCOPED_TRACE(name + " skid " + std::to_string(skid));
      const Result r =
          run_program("intel-netburst", with_double(skid, "16"), temp(name + ".jsonl"), p);
      ASSERT_EQ(r.status, 0) << dump(r);
      EXPECT_EQ(lines(r, name + ":"), expected);
      const HostLine h = host_line(r);
      ASSERT_TRUE(h.found) << dump(r);
      EXPECT_EQ(h.overshoots, 0u);
      EXPECT_GT(h.overflows, 0u);
      EXPECT_GT(h.unseen, counted(r) / 2) << dump(r);
    }
    const Result late =
        run_program("intel-netburst", with_double(40, "16"), temp(name + ".jsonl"), p);
    ASSERT_EQ(late.status, 0) << dump(late);
    EXPECT_NE(late.err.find("overflow came 24 instruction(s) past an event boundary"),
              std::string::npos)
        << late.err;
  }
}

// Events whose records or counts need each instruction (LWP branches: the predictor's bits;
// DCache) keep the guest stepped: lwp_exact's exact stream under the host backend.
TEST_F(HostBackend, EventsThatNeedEachInstructionAreStepped) {
  const Result r =
      run_program("amd-lwp", with_double(0), temp("lwp_exact.jsonl"), {program("lwp_exact")});
  ASSERT_EQ(r.status, 0) << dump(r);
  EXPECT_NE(r.out.find("lwp_exact: exact record stream"), std::string::npos) << dump(r);
  const HostLine h = host_line(r);
  ASSERT_TRUE(h.found) << dump(r);
  EXPECT_EQ(h.unseen, 0u) << "a branch event was active throughout";
}

// What this host's PMU allows, as pmuvm reports it: these machines (and the nested KVM host)
// have none, so `--backend host` is a usage error naming what is missing and `auto` says why it
// chose precise; on a host with a PMU the same commands take the host backend, and the test
// checks that instead.
TEST_F(HostBackend, WithoutAHostPmuHostIsAUsageErrorAndAutoSaysWhy) {
  const Result host = run({"run", "--backend", "host", "--", program("hello")});
  const Result automatic =
      run({"run", "--log-level", "info", "--backend", "auto", "--", program("hello")});
  ASSERT_EQ(automatic.status, 0) << dump(automatic);
  if (automatic.err.find("counting backend: host PMU counters") != std::string::npos) {
    EXPECT_EQ(host.status, 0) << "a host with a PMU: " << dump(host);
    return;
  }
  EXPECT_EQ(host.status, 2) << dump(host);
  EXPECT_NE(host.err.find("pmuvm: --backend host: the host PMU cannot count guest instructions ("),
            std::string::npos)
      << host.err;
  EXPECT_NE(host.err.find("--host-counters double runs the host backend without a PMU"),
            std::string::npos)
      << host.err;
  EXPECT_NE(automatic.err.find("counting backend: precise, KVM block-step stepper (auto: the "
                               "host PMU cannot count guest instructions ("),
            std::string::npos)
      << automatic.err;
}

// A profile with an architectural PMU (CPUID 0xA) gets KVM's vPMU where the host has a PMU; here
// it has none, so the leaf is dropped with the reason and the guest sees no PMU.
TEST_F(HostBackend, TheGuestsArchitecturalPmuComesFromKvmOrIsDroppedWithTheReason) {
  const std::string profile = scratch_file("core.json", R"({
  "name": "core", "description": "an Intel core with an architectural PMU",
  "vendor": "GenuineIntel", "family": "0x6", "model": "0x1A", "stepping": 5,
  "max_basic_leaf": "0xB", "max_extended_leaf": "0x80000008",
  "features": ["fpu", "tsc", "msr", "pae", "cx8", "apic", "sep", "pge", "cmov", "pat",
               "clfsh", "mmx", "fxsr", "sse", "sse2", "syscall", "nx", "lm"],
  "address_sizes": {"physical": 36, "linear": 48},
  "architectural_pmu": {"version": 2, "counters": 4, "counter_bits": 48,
                        "fixed_counters": 3, "fixed_counter_bits": 48},
  "cache": {"l1d": {"size_kib": 32, "ways": 8, "latency_cycles": 4},
            "l2": {"size_kib": 256, "ways": 8, "latency_cycles": 10},
            "dram_latency_cycles": 200}
})");
  const Result r = run({"run", "--cpu", profile, "--log-level", "info", "--", program("hello")});
  ASSERT_EQ(r.status, 0) << dump(r);
  const bool dropped =
      r.err.find("so the guest does not see: architectural_pmu (KVM offers no vPMU") !=
      std::string::npos;
  if (dropped)
    EXPECT_NE(r.err.find("guest PMU: none in the guest's CPUID (KVM offers no vPMU here)"),
              std::string::npos)
        << r.err;
  else
    EXPECT_NE(r.err.find("guest PMU: architectural (CPUID 0xA) version"), std::string::npos)
        << r.err;
  // A shipped profile has no PMU of its own: none, and KVM's vPMU (where there is one) is off.
  const Result plain = run({"run", "--log-level", "info", "--", program("hello")});
  ASSERT_EQ(plain.status, 0) << dump(plain);
  EXPECT_NE(plain.err.find("guest PMU: none in the guest's CPUID"), std::string::npos) << plain.err;
}

}  // namespace
