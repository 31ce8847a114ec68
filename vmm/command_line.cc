#include "vmm/command_line.h"

#include <CLI/CLI.hpp>
#include <optional>
#include <sstream>

#include "pmu/rate_limited_interrupt_sink.h"
#include "vmm/api/api_routes.h"
#include "vmm/machine_limits.h"
#include "vmm/precise/stepper_kind.h"

namespace vmm {
namespace {

// --stepper: every stepper that counts, and auto (kvm).
std::vector<std::string> stepper_choices() {
  std::vector<std::string> names;
  for (const StepperName& s : kStepperNames)
    if (s.kind != StepperKind::kNone) names.push_back(s.name);
  names.push_back("auto");
  return names;
}

constexpr const char* kRunFooter =
    "Programs follow the first `--`; further `--` separate programs, each a static ELF64 run as "
    "a ring-3 task of the bundled guest kernel with the arguments after it.\n"
    "Linux: `--kernel BZIMAGE [--initrd FILE] [--cmdline STR]` boots a Linux bzImage by the 64-bit "
    "boot protocol instead (no programs: Linux runs what its initramfs holds). COM1 is ttyS0 on "
    "stdout; the run ends when the guest resets (`reboot -f`: status 0) or writes a status to "
    "port 0x510 (`outl`: that status); a Linux panic ends it with status 3.\n"
    "Exit status: the guest's (0 when every task exited 0; 11 for a task killed for a faulting "
    "LLWPCB), 2 for a usage error, 3 for a VMM/KVM failure or a guest crash.";

std::string ctl_footer() {
  return "VERB is the endpoint's name as in its path (/api/v1/VERB): " + api::route_names() +
         ". JSON is its body: vm.snapshot '{\"destination_url\":\"file:///DIR\"}', "
         "vm.send-migration '{\"destination_url\":\"unix:/PATH\"}'; the GET verbs (vmm.ping, "
         "vm.info, vm.pmu) take none.\n"
         "Prints the answer's JSON body on stdout. Exit status: 0 for a 2xx answer, 1 for an error "
         "answer (\"pmuvm: VERB: STATUS REASON\" on stderr), 2 for a usage error, 3 when there is "
         "no answer (\"pmuvm: cannot connect to PATH: reason\").";
}
constexpr const char* kProfilesFooter =
    "--baseline A B ...: prints the migration baseline of two or more profiles (shipped names or "
    "JSON files) as a JSON profile on stdout, named baseline-of-A-B and usable as `--cpu FILE`: "
    "the AND of their feature bits and the minimum of their LWP event counts and sizes, identity "
    "and cache of the first. Its x86 feature bits are cross-checked with libvirt's "
    "virConnectBaselineCPU (test:///default driver); stderr says \"libvirt virConnectBaselineCPU "
    "agrees: N x86 features\", and a disagreement or no answer from libvirt is an error "
    "(status 3).\n"
    "--check-migration FROM TO: may a guest that booted with profile FROM run on a VMM whose "
    "profile is TO (same vendor, family and model; every feature, LWP capability and NetBurst "
    "counter the guest saw)? Prints \"migration from FROM to TO: accepted\" or \"...: refused\" "
    "and one line per missing thing.\n"
    "Exit status: 0 (migration accepted), 1 (migration refused), 2 for a usage error (unknown "
    "profile, wrong number of profiles, both options), 3 when libvirt fails or disagrees.";

// Splits `argv` at the first "--": CLI11 gets the options before it, the programs come after.
std::vector<ProgramArgs> split_programs(const std::vector<std::string>& after) {
  std::vector<ProgramArgs> programs;
  for (const std::string& a : after) {
    if (a == "--" || programs.empty()) {
      programs.emplace_back();
      if (a == "--") continue;
    }
    if (programs.back().path.empty()) programs.back().path = a;
    else programs.back().args.push_back(a);
  }
  return programs;
}

// Sets `cmd.mode` from what was given, or says why that combination is a usage error.
std::optional<std::string> choose_profiles_mode(ProfilesCommand& cmd, bool baseline, bool check,
                                                bool programs) {
  using Mode = ProfilesCommand::Mode;
  // CLI11 stores one empty value for an option given without any; no profile is called "".
  for (std::vector<std::string>* list : {&cmd.baseline, &cmd.check_migration})
    std::erase(*list, std::string());
  if (programs) return "profiles takes no programs";
  if (baseline && check) return "--baseline and --check-migration cannot be combined";
  if ((baseline || check) && !cmd.name.empty())
    return "profiles " + cmd.name + ": a profile to describe cannot be combined with " +
           (baseline ? "--baseline" : "--check-migration");
  if (baseline) {
    if (cmd.baseline.size() < 2)
      return "--baseline needs two or more profiles (names or files), got " +
             std::to_string(cmd.baseline.size());
    cmd.mode = Mode::kBaseline;
  } else if (check) {
    if (cmd.check_migration.size() != 2)
      return "--check-migration needs exactly two profiles, FROM and TO, got " +
             std::to_string(cmd.check_migration.size());
    cmd.mode = Mode::kCheckMigration;
  } else {
    cmd.mode = cmd.name.empty() ? Mode::kList : Mode::kDescribe;
  }
  return std::nullopt;
}

}  // namespace

ParsedCommandLine parse_command_line(const std::vector<std::string>& argv) {
  ParsedCommandLine out;
  std::vector<std::string> before;
  std::vector<std::string> after;
  bool separated = false;
  for (size_t i = 1; i < argv.size(); ++i) {
    if (!separated && argv[i] == "--") {
      separated = true;
      continue;
    }
    (separated ? after : before).push_back(argv[i]);
  }

  CLI::App app{"pmuvm — a KVM virtual machine monitor that gives guests virtual AMD Lightweight "
               "Profiling and a virtual Intel NetBurst PMU"};
  app.require_subcommand(1);
  RunCommand& run = out.run;
  CLI::App* run_cmd = app.add_subcommand(
      "run", "Boot the guest kernel and run PROGRAM(s) as ring-3 tasks, or boot Linux (--kernel BZIMAGE)");
  CLI::Option* cpu_opt =
      run_cmd->add_option("--cpu", run.cpu,
                          "CPU profile: a shipped name (see `pmuvm profiles`) or a JSON file; with "
                          "--incoming, the profile the arriving VM must fit (default: its own)")
          ->capture_default_str();
  run_cmd->add_option("--backend", run.backend,
                      "Counting backend: precise (every counted instruction stepped; no host PMU "
                      "needed), host (host counters count between event boundaries, the KVM "
                      "stepper steps up to each: the same records), auto (host where the host "
                      "PMU can count guest instructions, else precise)")
      ->check(CLI::IsMember({"precise", "host", "auto"}))
      ->capture_default_str();
  run_cmd->add_option("--host-counters", run.host_counters,
                      "What the host backend counts with: perf (the host PMU through "
                      "perf_event_open: guest-only retired instructions and branches) or double "
                      "(a test double that needs no PMU: the KVM stepper steps all along and the "
                      "double counts, its overflows --double-skid instructions late)")
      ->check(CLI::IsMember({"perf", "double"}))
      ->capture_default_str();
  run_cmd->add_option("--double-skid", run.double_skid,
                      "With --host-counters double: how many instructions after the overflowing "
                      "one its overflow ends the run (a host PMU's skid)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 20))
      ->capture_default_str();
  run_cmd->add_option("--skid-margin", run.skid_margin,
                      "The host backend's counters overflow this many events short of the next "
                      "event boundary and the rest is stepped: at least the host PMU's largest "
                      "skid (a later overflow is reported and the vCPU falls back to stepping)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20))
      ->capture_default_str();
  run_cmd->add_option("--stepper", run.stepper,
                      "How the precise backend sees each retired instruction: kvm (KVM debug "
                      "exits, every CPL, no guest help; one exit per basic block of register "
                      "code where only instruction/branch events count), kvm-single (the same, "
                      "one exit per instruction: the cross-check), guest (the bundled kernel "
                      "single-steps its profiled tasks and reports each step), auto (kvm)")
      ->check(CLI::IsMember(stepper_choices()))
      ->capture_default_str();
  run_cmd->add_option("--vcpus", run.vcpus, "Number of vCPUs")
      ->check(CLI::Range(uint32_t{1}, limits::kMaxVcpus))
      ->capture_default_str();
  run_cmd->add_option("--mem", run.mem_mib, "Guest RAM in MiB")
      ->check(CLI::Range(limits::kMinMemMib, limits::kMaxMemMib))
      ->capture_default_str();
  run_cmd
      ->add_option("--timer-hz", run.timer_hz,
                   "The bundled kernel's scheduler tick; 0 = none (tasks switch only when they "
                   "yield, wait or exit, and lwp_wait timeouts never expire: for runs whose "
                   "CPL-0 instruction counts must not depend on wall-clock time)")
      ->check(CLI::Range(uint32_t{0}, limits::kMaxTimerHz))
      ->capture_default_str();
  run_cmd->add_option("--seed", run.seed, "Seed of the LWPCB.Random generator (same seed, same records)")
      ->capture_default_str();
  run_cmd->add_option("--kernel", run.kernel,
                      "Guest kernel instead of the bundled one: an ELF kernel that reads pmuvm's "
                      "boot information, or a Linux bzImage (boot protocol 2.12+, 64-bit entry)");
  run_cmd->add_option("--initrd", run.initrd, "Linux: initramfs/initrd FILE, placed at the top of RAM");
  CLI::Option* cmdline_opt =
      run_cmd->add_option("--cmdline", run.cmdline, "Linux: the kernel command line")
          ->capture_default_str();
  run_cmd->add_option("--log-level", run.log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  run_cmd->add_option("--lwp-report", run.lwp_report,
                      "At exit, print the LWP profile per task and event to FILE (- = stdout); "
                      "it keeps 4096 tasks and 65536 addresses per task and event, and counts "
                      "the rest together");
  run_cmd->add_option("--lwp-trace", run.lwp_trace, "Write every stored LWP record to FILE as JSON lines");
  run_cmd->add_option("--max-interrupt-rate", run.max_interrupt_rate,
                      "Most PMU interrupts per second per vCPU; more are held back (0 = no limit, "
                      "at most 1000000)")
      ->check(CLI::Range(uint32_t{0}, pmu::RateLimitedInterruptSink::kMaxLimit))
      ->capture_default_str();
  run_cmd->add_option("--kvm-device", run.kvm_device,
                      "The KVM device to open (a VMM in a container may see it elsewhere)")
      ->capture_default_str();
  run_cmd->add_flag("--paused", run.paused,
                    "Start with every vCPU paused before its first instruction; the API socket's "
                    "vm.resume starts them (so a tool can attach, snapshot or migrate first). "
                    "Needs --api-socket");
  run_cmd->add_option("--pause-on-output", run.pause_on_output,
                      "Pause the VM right after the guest's console prints a line containing "
                      "TEXT (each TEXT once; may be given several times); vm.resume continues. A "
                      "place in the guest's run, not in time: for snapshots and migrations that "
                      "land at the same point on every host. Needs --api-socket")
      ->type_name("TEXT")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  run_cmd->add_option("--pause-at-instructions", run.pause_at_instructions,
                      "Pause the VM once the precise backend has counted N instructions (every "
                      "vCPU's together, as --stats and vm.pmu count them; a migrated VM's count "
                      "goes on from the source's); vm.resume continues. Needs --api-socket")
      ->type_name("N")
      ->check(CLI::Range(uint64_t{1}, UINT64_MAX));
  run_cmd->add_option("--debug-pause-every", run.debug_pause_every,
                      "Debugging pmuvm: every N KVM exits of vCPU 0, pause the whole VM (every "
                      "vCPU parked between instructions, as vm.pause does) and resume it at once. "
                      "Counts, LWP records, PMIs and output must come out the same as without it "
                      "(DESIGN §4.7); tests run both")
      ->type_name("N")
      ->check(CLI::Range(uint64_t{1}, UINT64_MAX));
  run_cmd->add_flag("--stats", run.stats,
                    "At exit, one line per vCPU on stderr: `pmuvm: vcpuN: exits E, single steps "
                    "S, blocks B, counted instructions I`; with the KVM stepper a second line "
                    "per vCPU breaks the exits down by kind and by stepper stop");
  run_cmd->add_option("--incoming", run.incoming,
                      "Wait at unix:PATH for a live migration (`vm.send-migration` of another "
                      "pmuvm) and run the VM that arrives; the machine, kernel and programs come "
                      "with it. Refused, before anything runs, if --cpu cannot present the CPUID "
                      "the guest saw (DESIGN §4.10)");
  run_cmd->add_option("--api-socket", run.api_socket,
                      "Serve the HTTP API (`pmuvm ctl`: pause, resume, snapshot, migrate, shut "
                      "down, PMU state) on a Unix socket at PATH, mode 0600; a stale socket file "
                      "there is replaced, a live one refused")
      ->type_name("PATH");
  run_cmd->footer(kRunFooter);

  RestoreCommand& restore = out.restore;
  CLI::App* restore_cmd = app.add_subcommand(
      "restore", "Resume a snapshot (written by the API's vm.snapshot) where it was taken");
  restore_cmd->add_option("--source", restore.source, "The snapshot: file:///DIR")->required();
  restore_cmd->add_option("--cpu", restore.cpu,
                          "A CPU profile the VM must fit (default: the snapshot's own); refused "
                          "when it cannot present the CPUID the guest saw");
  restore_cmd->add_option("--log-level", restore.log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  restore_cmd->add_option("--lwp-report", restore.lwp_report,
                          "At exit, print the LWP profile (since boot) to FILE (- = stdout)");
  restore_cmd->add_option("--lwp-trace", restore.lwp_trace,
                          "Write every LWP record stored from now on to FILE as JSON lines");
  restore_cmd->add_option("--kvm-device", restore.kvm_device, "The KVM device to open")
      ->capture_default_str();
  restore_cmd->add_option("--api-socket", restore.api_socket,
                          "Serve the HTTP API (DESIGN §4.10) on this Unix socket");
  restore_cmd->add_flag("--stats", restore.stats,
                        "At exit, one line per vCPU on stderr (as `run --stats`; counted since the "
                        "snapshot's boot)");

  ProfilesCommand& profiles = out.profiles;
  CLI::App* profiles_cmd = app.add_subcommand(
      "profiles", "List the shipped CPU profiles, describe one, print a migration set's baseline "
                  "(--baseline) or check a migration between two profiles (--check-migration)");
  profiles_cmd->add_option("profile", profiles.name, "A profile name or JSON file to describe");
  // Both take any number of values (also none, so a following option is never taken for a
  // value), and a wrong count gets our message below, not CLI11's.
  auto profile_list = [&](const char* name, std::vector<std::string>& values, const char* type,
                          const char* help) {
    return profiles_cmd->add_option(name, values, help)
        ->type_name(type)
        ->expected(0, CLI::detail::expected_max_vector_size);
  };
  CLI::Option* baseline_opt = profile_list(
      "--baseline", profiles.baseline, "A B",
      "Print the migration baseline of two or more profiles (names or files) as JSON, "
      "cross-checked with libvirt");
  CLI::Option* check_opt = profile_list(
      "--check-migration", profiles.check_migration, "PROFILE",
      "FROM TO: may a guest that booted with profile FROM run with profile TO? Status 0 yes, 1 no");
  profiles_cmd->footer(kProfilesFooter);

  CtlCommand& ctl = out.ctl;
  CLI::App* ctl_cmd = app.add_subcommand(
      "ctl", "Call the API socket of a running pmuvm (`pmuvm run --api-socket PATH`) and print "
             "the answer");
  ctl_cmd->add_option("--api-socket", ctl.api_socket, "The API socket to call")
      ->type_name("PATH")
      ->required();
  ctl_cmd->add_option("verb", ctl.verb, "The endpoint: " + api::route_names())->required();
  std::string ctl_body;
  CLI::Option* ctl_body_opt = ctl_cmd->add_option("json", ctl_body, "Its JSON body");
  ctl_cmd->footer(ctl_footer());

  std::vector<std::string> reversed(before.rbegin(), before.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    // CLI11 renders help for whichever (sub)command asked for it; errors become one line.
    std::ostringstream help, ignored;
    if (app.exit(e, help, ignored) == 0) {
      out.message = help.str();
      return out;
    }
    out.exit_status = 2;
    out.message = std::string("pmuvm: ") + e.what() + " (see pmuvm --help)";
    return out;
  }

  if (run_cmd->parsed()) {
    run.programs = split_programs(after);
    run.cmdline_given = cmdline_opt->count() > 0;
    run.cpu_given = cpu_opt->count() > 0;
    run.host_counters_given = run_cmd->get_option("--host-counters")->count() > 0;
    run.double_skid_given = run_cmd->get_option("--double-skid")->count() > 0;
    run.skid_margin_given = run_cmd->get_option("--skid-margin")->count() > 0;
    if (run.paused && run.api_socket.empty()) {
      out.exit_status = 2;
      out.message = "pmuvm: --paused needs --api-socket (only vm.resume can start the VM)";
      return out;
    }
    if ((!run.pause_on_output.empty() || run.pause_at_instructions) && run.api_socket.empty()) {
      out.exit_status = 2;
      out.message = std::string("pmuvm: ") +
                    (run.pause_at_instructions ? "--pause-at-instructions" : "--pause-on-output") +
                    " needs --api-socket (only vm.resume can continue the VM)";
      return out;
    }
    for (const std::string& text : run.pause_on_output)
      if (text.empty()) {
        out.exit_status = 2;
        out.message = "pmuvm: --pause-on-output needs a text (every line contains the empty one)";
        return out;
      }
    if (!run.incoming.empty()) {
      // The arriving VM brings its machine: options that shape one would be silently ignored.
      for (const char* name : {"--kernel", "--initrd", "--cmdline", "--vcpus", "--mem", "--seed",
                               "--timer-hz", "--stepper", "--backend", "--max-interrupt-rate",
                               "--host-counters", "--double-skid", "--skid-margin"})
        if (run_cmd->get_option(name)->count() > 0) {
          out.exit_status = 2;
          out.message = std::string("pmuvm: ") + name +
                        " cannot go with --incoming: the migrated VM brings its own machine";
          return out;
        }
      if (!run.programs.empty()) {
        out.exit_status = 2;
        out.message = "pmuvm: --incoming takes no programs: the migrated VM brings its own";
        return out;
      }
      if (run.incoming.rfind("unix:", 0) != 0 || run.incoming.size() <= 5) {
        out.exit_status = 2;
        out.message = "pmuvm: --incoming needs unix:PATH, not " + run.incoming;
        return out;
      }
      out.kind = ParsedCommandLine::Kind::kRun;
      return out;
    }
    if (run.kernel.empty() && (!run.initrd.empty() || run.cmdline_given)) {
      out.exit_status = 2;
      out.message = "pmuvm: --initrd and --cmdline need --kernel BZIMAGE (a Linux guest)";
      return out;
    }
    // With --kernel the file decides (main.cc): a bzImage takes no programs, an ELF kernel does.
    if (run.programs.empty() && run.kernel.empty()) {
      out.exit_status = 2;
      out.message = "pmuvm: run needs at least one program after `--` (see pmuvm run --help)";
      return out;
    }
    for (const ProgramArgs& p : run.programs) {
      if (p.path.empty()) {
        out.exit_status = 2;
        out.message = "pmuvm: empty program between `--` separators";
        return out;
      }
    }
    out.kind = ParsedCommandLine::Kind::kRun;
  } else if (restore_cmd->parsed()) {
    if (!after.empty()) {
      out.exit_status = 2;
      out.message = "pmuvm: restore takes no programs: the snapshot holds its own";
      return out;
    }
    if (restore.source.rfind("file:///", 0) != 0) {
      out.exit_status = 2;
      out.message = "pmuvm: --source needs file:///DIR, not " + restore.source;
      return out;
    }
    out.kind = ParsedCommandLine::Kind::kRestore;
  } else if (profiles_cmd->parsed()) {
    if (const std::optional<std::string> error =
            choose_profiles_mode(profiles, baseline_opt->count() > 0, check_opt->count() > 0,
                                 !after.empty())) {
      out.exit_status = 2;
      out.message = "pmuvm: " + *error;
      return out;
    }
    out.kind = ParsedCommandLine::Kind::kProfiles;
  } else if (ctl_cmd->parsed()) {
    if (!after.empty()) {
      out.exit_status = 2;
      out.message = "pmuvm: ctl takes no `--`: VERB and its JSON body follow the options";
      return out;
    }
    if (ctl_body_opt->count() > 0) ctl.body = ctl_body;
    out.kind = ParsedCommandLine::Kind::kCtl;
  }
  return out;
}

}  // namespace vmm
