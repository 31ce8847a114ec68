// The pmuvm command line (DESIGN §4.6): programs and their arguments after `--`, every option
// with its default, and usage errors as one line with exit status 2.
#include "vmm/cli/command_line.h"
#include "vmm/version.h"

#include <gtest/gtest.h>

namespace vmm {
namespace {

ParsedCommandLine parse(std::vector<std::string> args) {
  args.insert(args.begin(), "pmuvm");
  return parse_command_line(args);
}

TEST(CommandLineTest, RunWithProgramsAndArguments) {
  auto c = parse({"run", "--cpu", "amd-lwp-lite", "--vcpus", "2", "--mem", "64", "--seed", "9",
                  "--", "a.elf", "x", "--flag-for-guest", "--", "b.elf"});
  ASSERT_EQ(c.kind, ParsedCommandLine::Kind::kRun) << c.message;
  EXPECT_EQ(c.run.cpu, "amd-lwp-lite");
  EXPECT_EQ(c.run.vcpus, 2u);
  EXPECT_EQ(c.run.mem_mib, 64u);
  EXPECT_EQ(c.run.seed, 9u);
  ASSERT_EQ(c.run.programs.size(), 2u);
  EXPECT_EQ(c.run.programs[0].path, "a.elf");
  EXPECT_EQ(c.run.programs[0].args, (std::vector<std::string>{"x", "--flag-for-guest"}));
  EXPECT_EQ(c.run.programs[1].path, "b.elf");
  EXPECT_TRUE(c.run.programs[1].args.empty());
}

TEST(CommandLineTest, Defaults) {
  auto c = parse({"run", "--", "a.elf"});
  ASSERT_EQ(c.kind, ParsedCommandLine::Kind::kRun);
  EXPECT_EQ(c.run.cpu, "amd-lwp");
  EXPECT_EQ(c.run.backend, vmm::BackendKind::kAuto);
  EXPECT_EQ(c.run.stepper, vmm::StepperKind::kAuto);
  EXPECT_EQ(c.run.host_counters, vmm::HostCountersKind::kPerf);
  EXPECT_EQ(c.run.vcpus, 1u);
  EXPECT_EQ(c.run.mem_mib, 256u);
  EXPECT_EQ(c.run.seed, 1u);
  EXPECT_EQ(c.run.kernel, "");
  EXPECT_EQ(c.run.max_interrupt_rate, 10000u);
}

TEST(CommandLineTest, RunWithoutProgramIsUsageError) {
  auto c = parse({"run"});
  EXPECT_EQ(c.kind, ParsedCommandLine::Kind::kExit);
  EXPECT_EQ(c.exit_status, 2);
  EXPECT_EQ(c.message, "pmuvm: run needs at least one program after `--` (see pmuvm run --help)");
  EXPECT_EQ(parse({"run", "--", "a.elf", "--"}).exit_status, 2);
}

TEST(CommandLineTest, BadOptionValuesAreUsageErrors) {
  for (auto args : std::vector<std::vector<std::string>>{
           {"run", "--vcpus", "0", "--", "a"},
           {"run", "--vcpus", "many", "--", "a"},
           {"run", "--mem", "1", "--", "a"},
           {"run", "--backend", "magic", "--", "a"},
           {"run", "--stepper", "none", "--", "a"},  // a manifest's, not the command line's
           {"run", "--stepper", "1", "--", "a"},     // names, not numbers
           {"run", "--host-counters", "pmu", "--", "a"},
           {"run", "--log-level", "loud", "--", "a"},
           {"run", "--max-interrupt-rate", "4000000000", "--", "a"},  // was std::bad_alloc, exit 3
           {"run", "--max-interrupt-rate", "1000001", "--", "a"},
           {"run", "--bogus", "--", "a"},
           {"frobnicate"},
           {}}) {
    auto c = parse(args);
    EXPECT_EQ(c.kind, ParsedCommandLine::Kind::kExit);
    EXPECT_EQ(c.exit_status, 2) << ::testing::PrintToString(args);
    EXPECT_EQ(c.message.rfind("pmuvm: ", 0), 0u) << c.message;
    EXPECT_EQ(c.message.find('\n'), std::string::npos) << "one line: " << c.message;
  }
}

// The counting options parse to their kinds (vmm/counting_kinds.h), by name only.
TEST(CommandLineTest, CountingOptionsAreKinds) {
  auto c = parse({"run", "--backend", "host", "--stepper", "kvm-single", "--host-counters",
                  "double", "--", "a"});
  ASSERT_EQ(c.kind, ParsedCommandLine::Kind::kRun) << c.message;
  EXPECT_EQ(c.run.backend, vmm::BackendKind::kHost);
  EXPECT_EQ(c.run.stepper, vmm::StepperKind::kKvmSingle);
  EXPECT_EQ(c.run.host_counters, vmm::HostCountersKind::kDouble);
  EXPECT_EQ(parse({"run", "--stepper", "guest", "--", "a"}).run.stepper, vmm::StepperKind::kGuest);
  EXPECT_EQ(parse({"run", "--stepper", "auto", "--backend", "precise", "--", "a"}).run.backend,
            vmm::BackendKind::kPrecise);
  const std::string help = parse({"run", "--help"}).message;
  // Names and defaults by name, "none" not offered.
  EXPECT_NE(help.find("{precise,host,auto}=auto"), std::string::npos) << help;
  EXPECT_NE(help.find("{kvm,kvm-single,emulate,guest,auto}=auto"), std::string::npos) << help;
  EXPECT_EQ(parse({"run", "--stepper", "emulate", "--", "a"}).run.stepper,
            vmm::StepperKind::kEmulate);
  EXPECT_NE(help.find("{perf,double}=perf"), std::string::npos) << help;
}

TEST(CommandLineTest, HelpDocumentsEveryRunOption) {
  auto c = parse({"run", "--help"});
  EXPECT_EQ(c.kind, ParsedCommandLine::Kind::kExit);
  EXPECT_EQ(c.exit_status, 0);
  for (const char* option :
       {"--cpu", "--backend", "--vcpus", "--mem", "--seed", "--kernel", "--initrd", "--cmdline",
        "port 0x510", "reboot -f", "--log-level", "--lwp-report", "--lwp-trace",
        "--max-interrupt-rate", "--api-socket", "Exit status"})
    EXPECT_NE(c.message.find(option), std::string::npos) << option;
  auto top = parse({"--help"});
  EXPECT_EQ(top.exit_status, 0);
  EXPECT_NE(top.message.find("profiles"), std::string::npos);
  EXPECT_NE(top.message.find("ctl"), std::string::npos);
}

// The usage lines name the program and its subcommand, and --version says which pmuvm this is
// (issue 42: "Usage: [OPTIONS] SUBCOMMAND" named nothing).
TEST(CommandLineTest, UsageNamesTheProgramAndVersionIsOneLine) {
  EXPECT_NE(parse({"--help"}).message.find("Usage: pmuvm [OPTIONS] SUBCOMMAND"), std::string::npos)
      << parse({"--help"}).message;
  EXPECT_NE(parse({"run", "--help"}).message.find("Usage: pmuvm run [OPTIONS]"), std::string::npos);
  const auto v = parse({"--version"});
  EXPECT_EQ(v.kind, ParsedCommandLine::Kind::kExit);
  EXPECT_EQ(v.exit_status, 0);
  EXPECT_EQ(v.message, std::string(vmm::kPmuvmVersion) + "\n");
}

// A Linux guest: --kernel alone is enough (whether it is a bzImage is the file's business,
// checked by main.cc); --initrd/--cmdline need --kernel.
TEST(CommandLineTest, LinuxOptions) {
  auto c = parse(
      {"run", "--kernel", "bzImage", "--initrd", "rd.cpio", "--cmdline", "console=ttyS0 -- x"});
  ASSERT_EQ(c.kind, ParsedCommandLine::Kind::kRun) << c.message;
  EXPECT_EQ(c.run.kernel, "bzImage");
  EXPECT_EQ(c.run.initrd, "rd.cpio");
  EXPECT_EQ(c.run.cmdline, "console=ttyS0 -- x");
  EXPECT_TRUE(c.run.cmdline_given);
  EXPECT_TRUE(c.run.programs.empty());
  auto d = parse({"run", "--kernel", "bzImage"});
  ASSERT_EQ(d.kind, ParsedCommandLine::Kind::kRun);
  EXPECT_EQ(d.run.cmdline, "console=ttyS0");
  EXPECT_FALSE(d.run.cmdline_given);
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"run", "--initrd", "rd.cpio", "--", "hello"},
                                             {"run", "--cmdline", "quiet", "--", "hello"}}) {
    auto e = parse(args);
    EXPECT_EQ(e.exit_status, 2);
    EXPECT_EQ(e.message, "pmuvm: --initrd and --cmdline need --kernel BZIMAGE (a Linux guest)");
  }
}

TEST(CommandLineTest, Profiles) {
  auto list = parse({"profiles"});
  ASSERT_EQ(list.kind, ParsedCommandLine::Kind::kProfiles);
  EXPECT_EQ(list.profiles.mode, ProfilesCommand::Mode::kList);
  EXPECT_EQ(list.profiles.name, "");
  auto one = parse({"profiles", "amd-lwp"});
  EXPECT_EQ(one.profiles.mode, ProfilesCommand::Mode::kDescribe);
  EXPECT_EQ(one.profiles.name, "amd-lwp");
  EXPECT_EQ(parse({"profiles", "--", "x.elf"}).exit_status, 2);
}

TEST(CommandLineTest, RunApiSocket) {
  EXPECT_EQ(parse({"run", "--", "a.elf"}).run.api_socket, "");
  auto c = parse({"run", "--api-socket", "/run/pmuvm.sock", "--", "a.elf"});
  ASSERT_EQ(c.kind, ParsedCommandLine::Kind::kRun) << c.message;
  EXPECT_EQ(c.run.api_socket, "/run/pmuvm.sock");
  EXPECT_EQ(parse({"run", "--api-socket", "--", "a.elf"}).exit_status, 2);
}

// `pmuvm ctl --api-socket PATH VERB [JSON]` (DESIGN §4.10); which verbs exist and whether the
// JSON parses is call_api's business (tests/api), so a typo gets the list of verbs.
TEST(CommandLineTest, Ctl) {
  auto c = parse({"ctl", "--api-socket", "/run/p.sock", "vm.snapshot",
                  R"({"destination_url": "file:///var/snap"})"});
  ASSERT_EQ(c.kind, ParsedCommandLine::Kind::kCtl) << c.message;
  EXPECT_EQ(c.ctl.api_socket, "/run/p.sock");
  EXPECT_EQ(c.ctl.verb, "vm.snapshot");
  EXPECT_EQ(c.ctl.body, R"({"destination_url": "file:///var/snap"})");

  auto no_body = parse({"ctl", "vm.pause", "--api-socket", "p.sock"});
  ASSERT_EQ(no_body.kind, ParsedCommandLine::Kind::kCtl) << no_body.message;
  EXPECT_EQ(no_body.ctl.verb, "vm.pause");
  EXPECT_EQ(no_body.ctl.body, std::nullopt);

  auto empty_body = parse({"ctl", "--api-socket", "p.sock", "vm.resume", ""});
  EXPECT_EQ(empty_body.ctl.body, "");
  EXPECT_EQ(parse({"ctl", "--api-socket", "p.sock", "vm.frobnicate"}).ctl.verb, "vm.frobnicate");
}

TEST(CommandLineTest, CtlUsageErrors) {
  for (auto args : std::vector<std::vector<std::string>>{
           {"ctl", "vm.pause"},                // no socket
           {"ctl", "--api-socket", "p.sock"},  // no verb
           {"ctl", "--api-socket"},            // no socket path
           {"ctl", "--api-socket", "p.sock", "vm.pause", "{}", "extra"},
           {"ctl", "--api-socket", "p.sock", "--bogus", "vm.pause"}}) {
    auto c = parse(args);
    EXPECT_EQ(c.kind, ParsedCommandLine::Kind::kExit) << ::testing::PrintToString(args);
    EXPECT_EQ(c.exit_status, 2) << ::testing::PrintToString(args);
    EXPECT_EQ(c.message.rfind("pmuvm: ", 0), 0u) << c.message;
    EXPECT_EQ(c.message.find('\n'), std::string::npos) << "one line: " << c.message;
  }
  auto dashes = parse({"ctl", "--api-socket", "p.sock", "vm.pause", "--", "x"});
  EXPECT_EQ(dashes.exit_status, 2);
  EXPECT_EQ(dashes.message, "pmuvm: ctl takes no `--`: VERB and its JSON body follow the options");
}

TEST(CommandLineTest, CtlHelpDocumentsVerbsBodiesAndExitStatus) {
  auto c = parse({"ctl", "--help"});
  EXPECT_EQ(c.kind, ParsedCommandLine::Kind::kExit);
  EXPECT_EQ(c.exit_status, 0);
  for (const char* text : {"--api-socket", "vmm.ping", "vm.info", "vm.pause", "vm.resume",
                           "vm.snapshot", "vm.send-migration", "vm.shutdown", "vm.pmu",
                           "file:///DIR", "unix:/PATH", "Exit status", "cannot connect to PATH"})
    EXPECT_NE(c.message.find(text), std::string::npos) << text;
}

TEST(CommandLineTest, ProfilesBaselineAndCheckMigration) {
  auto b = parse({"profiles", "--baseline", "amd-lwp", "amd-lwp-lite", "my.json"});
  ASSERT_EQ(b.kind, ParsedCommandLine::Kind::kProfiles) << b.message;
  EXPECT_EQ(b.profiles.mode, ProfilesCommand::Mode::kBaseline);
  EXPECT_EQ(b.profiles.baseline, (std::vector<std::string>{"amd-lwp", "amd-lwp-lite", "my.json"}));
  auto c = parse({"profiles", "--check-migration", "amd-lwp", "amd-lwp-lite"});
  ASSERT_EQ(c.kind, ParsedCommandLine::Kind::kProfiles) << c.message;
  EXPECT_EQ(c.profiles.mode, ProfilesCommand::Mode::kCheckMigration);
  EXPECT_EQ(c.profiles.check_migration, (std::vector<std::string>{"amd-lwp", "amd-lwp-lite"}));
}

// Wrong counts and combinations are usage errors in our words, one line, status 2.
TEST(CommandLineTest, ProfilesUsageErrors) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"profiles", "--baseline"}, "--baseline needs two or more profiles (names or files), got 0"},
      {{"profiles", "--baseline", "amd-lwp"},
       "--baseline needs two or more profiles (names or files), got 1"},
      {{"profiles", "--check-migration"},
       "--check-migration needs exactly two profiles, FROM and TO, got 0"},
      {{"profiles", "--check-migration", "a"},
       "--check-migration needs exactly two profiles, FROM and TO, got 1"},
      {{"profiles", "--check-migration", "a", "b", "c"},
       "--check-migration needs exactly two profiles, FROM and TO, got 3"},
      {{"profiles", "--baseline", "a", "b", "--check-migration", "a", "b"},
       "--baseline and --check-migration cannot be combined"},
      {{"profiles", "--baseline", "--check-migration", "a", "b"},
       "--baseline and --check-migration cannot be combined"},
      {{"profiles", "x", "--baseline", "a", "b"},
       "profiles x: a profile to describe cannot be combined with --baseline"},
      {{"profiles", "--baseline", "a", "b", "--", "x.elf"}, "profiles takes no programs"},
  };
  for (const auto& [args, message] : cases) {
    SCOPED_TRACE(::testing::PrintToString(args));
    auto c = parse(args);
    EXPECT_EQ(c.kind, ParsedCommandLine::Kind::kExit);
    EXPECT_EQ(c.exit_status, 2);
    EXPECT_EQ(c.message, "pmuvm: " + message);
  }
}

TEST(CommandLineTest, HelpDocumentsTheProfilesOptions) {
  auto c = parse({"profiles", "--help"});
  EXPECT_EQ(c.exit_status, 0);
  for (const char* text : {"--baseline A B", "--check-migration", "usable as `--cpu FILE`",
                           "virConnectBaselineCPU", "migration from FROM to TO: accepted",
                           "Exit status: 0 (migration accepted), 1 (migration refused), 2",
                           "3 when libvirt fails or disagrees"})
    EXPECT_NE(c.message.find(text), std::string::npos) << text;
  EXPECT_NE(parse({"--help"}).message.find("--check-migration"), std::string::npos);
}

// Snapshots and migration (DESIGN §4.10): the destination and restore take no machine options.
TEST(CommandLineTest, IncomingAndRestore) {
  auto in = parse({"run", "--incoming", "unix:/tmp/m.sock", "--cpu", "amd-lwp-lite"});
  ASSERT_EQ(in.kind, ParsedCommandLine::Kind::kRun) << in.message;
  EXPECT_EQ(in.run.incoming, "unix:/tmp/m.sock");
  EXPECT_TRUE(in.run.cpu_given);
  EXPECT_FALSE(parse({"run", "--incoming", "unix:/m", "--lwp-report", "-"}).run.cpu_given);
  EXPECT_EQ(parse({"run", "--incoming", "unix:/m", "--mem", "64"}).message,
            "pmuvm: --mem cannot go with --incoming: the migrated VM brings its own machine");
  EXPECT_EQ(parse({"run", "--incoming", "unix:/m", "--", "a.elf"}).message,
            "pmuvm: --incoming takes no programs: the migrated VM brings its own");
  EXPECT_EQ(parse({"run", "--incoming", "tcp:1.2.3.4:5"}).message,
            "pmuvm: --incoming needs unix:PATH, not tcp:1.2.3.4:5");
  // What an arriving VM may ask for: limits of the destination, meaningless without --incoming.
  auto capped = parse({"run", "--incoming", "unix:/m", "--max-mem", "512", "--max-vcpus", "2"});
  ASSERT_EQ(capped.kind, ParsedCommandLine::Kind::kRun) << capped.message;
  EXPECT_EQ(capped.run.max_mem_mib, 512u);
  EXPECT_EQ(capped.run.max_vcpus, 2u);
  EXPECT_EQ(parse({"run", "--max-vcpus", "2", "--", "a.elf"}).message,
            "pmuvm: --max-vcpus limits what an arriving VM may ask for: it goes with --incoming");

  EXPECT_TRUE(parse({"run", "--paused", "--api-socket", "/a", "--", "a.elf"}).run.start_paused);
  EXPECT_EQ(parse({"run", "--paused", "--", "a.elf"}).message,
            "pmuvm: --paused needs --api-socket (only vm.resume can start the VM)");

  // Progress points: repeatable texts, a count, both need the API socket that resumes the VM.
  auto p = parse({"run", "--api-socket", "/a", "--pause-on-output", "round 4", "--pause-on-output",
                  "done", "--pause-at-instructions", "1000", "--stats", "--", "a.elf", "x"});
  ASSERT_EQ(p.kind, ParsedCommandLine::Kind::kRun) << p.message;
  EXPECT_EQ(p.run.pause_on_output, (std::vector<std::string>{"round 4", "done"}));
  EXPECT_EQ(p.run.pause_at_instructions, 1000u);
  EXPECT_TRUE(p.run.stats);
  ASSERT_EQ(p.run.programs.size(), 1u);
  EXPECT_EQ(p.run.programs[0].args, std::vector<std::string>{"x"});
  EXPECT_EQ(parse({"run", "--pause-on-output", "x", "--", "a.elf"}).message,
            "pmuvm: --pause-on-output needs --api-socket (only vm.resume can continue the VM)");
  EXPECT_EQ(
      parse({"run", "--pause-at-instructions", "9", "--", "a.elf"}).message,
      "pmuvm: --pause-at-instructions needs --api-socket (only vm.resume can continue the VM)");
  EXPECT_EQ(parse({"run", "--api-socket", "/a", "--pause-on-output", "", "--", "a.elf"}).message,
            "pmuvm: --pause-on-output needs a text (every line contains the empty one)");
  // --progress: auto unless said; a choice of three.
  EXPECT_EQ(parse({"run", "--", "a.elf"}).run.progress, "auto");
  EXPECT_EQ(parse({"run", "--progress", "always", "--", "a.elf"}).run.progress, "always");
  EXPECT_EQ(parse({"run", "--progress", "sometimes", "--", "a.elf"}).exit_status, 2);
  // --symbols: repeatable, and only with the report whose addresses it names.
  auto sym = parse(
      {"run", "--lwp-report", "-", "--symbols", "a.elf", "--symbols", "b.elf", "--", "a.elf"});
  ASSERT_EQ(sym.kind, ParsedCommandLine::Kind::kRun) << sym.message;
  EXPECT_EQ(sym.run.symbols, (std::vector<std::string>{"a.elf", "b.elf"}));
  EXPECT_EQ(parse({"run", "--symbols", "a.elf", "--", "a.elf"}).message,
            "pmuvm: --symbols names the addresses of the LWP report or perf data: it goes with "
            "--lwp-report or --perf-data");
  EXPECT_EQ(parse({"restore", "--source", "file:///tmp/s", "--symbols", "a.elf"}).message,
            "pmuvm: --symbols names the addresses of the LWP report or perf data: it goes with "
            "--lwp-report or --perf-data");
  EXPECT_EQ(parse({"run", "--api-socket", "/a", "--pause-at-instructions", "0", "--", "a.elf"})
                .exit_status,
            2);
  auto in2 = parse(
      {"run", "--incoming", "unix:/m", "--api-socket", "/a", "--pause-at-instructions", "77"});
  ASSERT_EQ(in2.kind, ParsedCommandLine::Kind::kRun) << in2.message;
  EXPECT_EQ(in2.run.pause_at_instructions, 77u);

  auto r = parse({"restore", "--source", "file:///tmp/snap", "--lwp-report", "-"});
  ASSERT_EQ(r.kind, ParsedCommandLine::Kind::kRestore) << r.message;
  EXPECT_EQ(r.restore.source, "file:///tmp/snap");
  EXPECT_EQ(r.restore.lwp_report, "-");
  EXPECT_EQ(r.restore.cpu, "");
  EXPECT_EQ(parse({"restore", "--source", "/tmp/snap"}).message,
            "pmuvm: --source needs file:///DIR, not /tmp/snap");
  EXPECT_EQ(parse({"restore"}).exit_status, 2);
  EXPECT_EQ(parse({"restore", "--source", "file:///s", "--", "x"}).exit_status, 2);
}

}  // namespace
}  // namespace vmm
