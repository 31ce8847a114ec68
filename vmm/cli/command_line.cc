#include "vmm/cli/command_line.h"

#include "vmm/version.h"

#include <CLI/CLI.hpp>
#include <optional>
#include <sstream>
#include <type_traits>
#include <variant>

#include "pmu/rate_limited_interrupt_sink.h"
#include "vmm/api/api_routes.h"
#include "vmm/machine_limits.h"

namespace vmm {
namespace {

// An enum option's names (vmm/counting_kinds.h): the first `offered` of its table
// (--stepper: not the manifest's "none").
template <typename Kind, size_t N>
std::vector<std::string> names(const std::array<KindName<Kind>, N>& table, size_t offered = N) {
  std::vector<std::string> out;
  for (size_t i = 0; i < offered && i < N; ++i) out.push_back(table[i].name);
  return out;
}
// Each enum option's table, and how many of its names the command line offers.
const auto& kind_table(BackendKind) { return kBackendNames; }
const auto& kind_table(StepperKind) { return kStepperNames; }
const auto& kind_table(HostCountersKind) { return kHostCountersNames; }
// --stepper offers every stepper but the last, a manifest's "none".
static_assert(kStepperNames.back().kind == StepperKind::kNone);
size_t offered_names(StepperKind) { return kStepperNames.size() - 1; }
template <typename Kind>
size_t offered_names(Kind) {
  return kind_table(Kind{}).size();
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
    if (programs.back().path.empty())
      programs.back().path = a;
    else
      programs.back().args.push_back(a);
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

// One option of a subcommand: its name, the member of the command it sets, its help, how its
// value is checked, and how --help shows it. A subcommand's options are a table of these rows,
// in the order --help lists them.
template <typename Command>
struct OptionRow {
  using Field = std::variant<std::string Command::*, uint32_t Command::*, uint64_t Command::*,
                             bool Command::*, std::vector<std::string> Command::*,
                             std::optional<uint64_t> Command::*, BackendKind Command::*,
                             StepperKind Command::*, HostCountersKind Command::*>;
  const char* name;
  Field field;
  const char* help;
  std::vector<CLI::Validator> checks = {};  // at most one (an enum's: its names, implied)
  const char* type_name = nullptr;  // what --help calls the value (CLI11's default: its type)
  bool show_default = true;         // --help shows the default value
  bool shapes_machine = false;      // run: the machine's shape, which a migrated VM brings itself
};

template <typename T>
CLI::Validator range(T low, T high) {
  return CLI::Range(low, high);
}
CLI::Validator one_of(std::vector<std::string> names) { return CLI::IsMember(std::move(names)); }

const std::vector<std::string> kLogLevels = {"trace", "debug", "info", "warn", "error", "off"};

// --log-level, which `run` and `restore` share.
template <typename Command>
OptionRow<Command> log_level_row() {
  return {"--log-level",
          &Command::log_level,
          "trace, debug, info, warn, error or off",
          {one_of(kLogLevels)}};
}

// --progress, which `run` and `restore` share.
template <typename Command>
OptionRow<Command> progress_row() {
  return {"--progress",
          &Command::progress,
          "A line of progress on stderr, rewritten once a second (time, instructions counted, LWP "
          "records, exits per second): auto (when stderr is a terminal), always, never",
          {one_of({"auto", "always", "never"})}};
}

template <typename Command>
void add_options(CLI::App& app, Command& cmd, const std::vector<OptionRow<Command>>& rows) {
  for (const OptionRow<Command>& row : rows) {
    CLI::Option* option = std::visit(
        [&](auto member) -> CLI::Option* {
          auto& value = cmd.*member;
          using Value = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<Value, bool>) {
            return app.add_flag(row.name, value, row.help);
          } else if constexpr (std::is_enum_v<Value>) {
            // Given by name only; --help shows the names and the default's.
            const auto& table = kind_table(value);
            CLI::Option* o = app.add_option_function<std::string>(
                row.name,
                [&value, &table](const std::string& name) {
                  value = *parse_kind(table, name);  // IsMember let only its names through
                },
                row.help);
            o->check(one_of(names(table, offered_names(value))));
            o->default_str(kind_entry(table, value).name);
            return o;
          } else {
            CLI::Option* o = app.add_option(row.name, value, row.help);
            // A repeatable option: each occurrence adds one value.
            if constexpr (std::is_same_v<Value, std::vector<std::string>>)
              o->expected(1)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
            else if (row.show_default)
              o->capture_default_str();
            return o;
          }
        },
        row.field);
    for (const CLI::Validator& check : row.checks) option->check(check);
    if (row.type_name) option->type_name(row.type_name);
  }
}

// `pmuvm run`'s options, in --help's order.
std::vector<OptionRow<RunCommand>> run_options() {
  using R = RunCommand;
  return {
      {"--cpu", &R::cpu,
       "CPU profile: a shipped name (see `pmuvm profiles`) or a JSON file; with --incoming, the "
       "profile the arriving VM must fit (default: its own)"},
      {"--backend",
       &R::backend,
       "Counting backend: precise (every counted instruction stepped; no host PMU needed), host "
       "(host counters count between event boundaries, the KVM stepper steps up to each: the "
       "same records), auto (host where the host PMU can count guest instructions, else "
       "precise)",
       {},
       nullptr,
       true,
       true},
      {"--host-counters",
       &R::host_counters,
       "What the host backend counts with: perf (the host PMU through perf_event_open: "
       "guest-only retired instructions and branches) or double (a test double that needs no "
       "PMU: the KVM stepper steps all along and the double counts, its overflows --double-skid "
       "instructions late)",
       {},
       nullptr,
       true,
       true},
      {"--double-skid",
       &R::double_skid,
       "With --host-counters double: how many instructions after the overflowing one its "
       "overflow ends the run (a host PMU's skid)",
       {range(uint64_t{0}, uint64_t{1} << 20)},
       nullptr,
       true,
       true},
      {"--skid-margin",
       &R::skid_margin,
       "The host backend's counters overflow this many events short of the next event boundary "
       "and the rest is stepped: at least the host PMU's largest skid (a later overflow is "
       "reported and the vCPU falls back to stepping)",
       {range(uint64_t{1}, uint64_t{1} << 20)},
       nullptr,
       true,
       true},
      {"--stepper",
       &R::stepper,
       "How the precise backend sees each retired instruction: kvm (KVM debug exits, every CPL, "
       "no guest help; one exit per basic block of register code where only instruction/branch "
       "events count), kvm-single (the same, one exit per instruction: the cross-check), emulate "
       "(kvm, with counted user code run by an embedded TCG, Unicorn, wherever the PMU models "
       "only count instructions and branches; what it must not run goes back to KVM), guest "
       "(the bundled kernel single-steps its profiled tasks and reports each step), auto (kvm)",
       {},
       nullptr,
       true,
       true},
      {"--vcpus",
       &R::vcpus,
       "Number of vCPUs",
       {range(uint32_t{1}, limits::kMaxVcpus)},
       nullptr,
       true,
       true},
      {"--mem",
       &R::mem_mib,
       "Guest RAM in MiB",
       {range(limits::kMinMemMib, limits::kMaxMemMib)},
       nullptr,
       true,
       true},
      {"--timer-hz",
       &R::timer_hz,
       "The bundled kernel's scheduler tick; 0 = none (tasks switch only when they yield, wait or "
       "exit, and lwp_wait timeouts never expire: for runs whose CPL-0 instruction counts must "
       "not depend on wall-clock time)",
       {range(uint32_t{0}, limits::kMaxTimerHz)},
       nullptr,
       true,
       true},
      {"--seed",
       &R::seed,
       "Seed of the LWPCB.Random generator (same seed, same records)",
       {},
       nullptr,
       true,
       true},
      {"--kernel",
       &R::kernel,
       "Guest kernel instead of the bundled one: an ELF kernel that reads pmuvm's boot "
       "information, or a Linux bzImage (boot protocol 2.12+, 64-bit entry)",
       {},
       nullptr,
       false,
       true},
      {"--initrd",
       &R::initrd,
       "Linux: initramfs/initrd FILE, placed at the top of RAM",
       {},
       nullptr,
       false,
       true},
      {"--cmdline", &R::cmdline, "Linux: the kernel command line", {}, nullptr, true, true},
      log_level_row<R>(),
      {"--lwp-report",
       &R::lwp_report,
       "At exit, print the LWP profile per task and event to FILE (- = stdout); it keeps 4096 "
       "tasks and 65536 addresses per task and event, and counts the rest together",
       {},
       nullptr,
       false},
      {"--lwp-trace",
       &R::lwp_trace,
       "Write every stored LWP record to FILE as JSON lines",
       {},
       nullptr,
       false},
      {"--perf-data",
       &R::perf_data,
       "Write the LWP records (and NetBurst PMIs) of the run as a perf.data FILE for Linux's perf "
       "tools (`perf report -i FILE`, `perf script`, `perf annotate`): one sample per record or "
       "PMI, with the task's ELF "
       "mapped so perf names functions and lines (the bundled kernel's programs; --symbols' first "
       "file for other tasks)",
       {},
       "FILE",
       false},
      {"--symbols",
       &R::symbols,
       "An ELF file (static, with its symbols; DWARF for lines) whose functions, files and lines "
       "name the --lwp-report's addresses of tasks that are not a program given here (Linux "
       "processes, a resumed VM's tasks); may be given several times, the first that knows an "
       "address names it. The bundled kernel's programs are named from their own files",
       {},
       "ELF",
       false},
      {"--max-interrupt-rate",
       &R::max_interrupt_rate,
       "Most PMU interrupts per second per vCPU; more are held back (0 = no limit, at most "
       "1000000)",
       {range(uint32_t{0}, pmu::RateLimitedInterruptSink::kMaxLimit)},
       nullptr,
       true,
       true},
      {"--kvm-device", &R::kvm_device,
       "The KVM device to open (a VMM in a container may see it elsewhere)"},
      {"--paused", &R::start_paused,
       "Start with every vCPU paused before its first instruction; the API socket's vm.resume "
       "starts them (so a tool can attach, snapshot or migrate first). Needs --api-socket"},
      {"--pause-on-output",
       &R::pause_on_output,
       "Pause the VM right after the guest's console prints a line containing TEXT (each TEXT "
       "once; may be given several times); vm.resume continues. A place in the guest's run, not "
       "in time: for snapshots and migrations that land at the same point on every host. Needs "
       "--api-socket",
       {},
       "TEXT",
       false},
      {"--pause-at-instructions",
       &R::pause_at_instructions,
       "Pause the VM once the precise backend has counted N instructions (every vCPU's together, "
       "as --stats and vm.pmu count them; a migrated VM's count goes on from the source's); "
       "vm.resume continues. Needs --api-socket",
       {range(uint64_t{1}, UINT64_MAX)},
       "N",
       false},
      {"--debug-pause-every",
       &R::debug_pause_every,
       "Debugging pmuvm: every N KVM exits of vCPU 0, pause the whole VM (every vCPU parked "
       "between instructions, as vm.pause does) and resume it at once. Counts, LWP records, PMIs "
       "and output must come out the same as without it (DESIGN §4.7); tests run both",
       {range(uint64_t{1}, UINT64_MAX)},
       "N",
       false},
      progress_row<R>(),
      {"--stats", &R::stats,
       "At exit, one line per vCPU on stderr: `pmuvm: vcpuN: exits E, single steps S, blocks B, "
       "counted instructions I`; with the KVM stepper a second line per vCPU breaks the exits "
       "down by kind and by stepper stop"},
      {"--incoming",
       &R::incoming,
       "Wait at unix:PATH for a live migration (`vm.send-migration` of another pmuvm) and run "
       "the VM that arrives; the machine, kernel and programs come with it. Refused, before "
       "anything runs, if --cpu cannot present the CPUID the guest saw (DESIGN §4.10)",
       {},
       nullptr,
       false},
      {"--max-mem",
       &R::max_mem_mib,
       "With --incoming: refuse an arriving VM that asks for more guest RAM than this (MiB); by "
       "default the host's physical memory is the limit (a migration's peer chooses the size)",
       {range(limits::kMinMemMib, limits::kMaxMemMib)},
       "MiB",
       false},
      {"--max-vcpus",
       &R::max_vcpus,
       "With --incoming: refuse an arriving VM that asks for more vCPUs than this",
       {range(uint64_t{1}, uint64_t{limits::kMaxVcpus})},
       "N",
       false},
      {"--api-socket",
       &R::api_socket,
       "Serve the HTTP API (`pmuvm ctl`: pause, resume, snapshot, migrate, shut down, PMU state) "
       "on a Unix socket at PATH, mode 0600; a stale socket file there is replaced, a live one "
       "refused",
       {},
       "PATH",
       false},
  };
}

// `pmuvm restore`'s options.
std::vector<OptionRow<RestoreCommand>> restore_options() {
  using R = RestoreCommand;
  return {
      {"--source", &R::source, "The snapshot: file:///DIR", {}, nullptr, false},
      {"--cpu",
       &R::cpu,
       "A CPU profile the VM must fit (default: the snapshot's own); refused when it cannot "
       "present the CPUID the guest saw",
       {},
       nullptr,
       false},
      log_level_row<R>(),
      {"--lwp-report",
       &R::lwp_report,
       "At exit, print the LWP profile (since boot) to FILE (- = stdout)",
       {},
       nullptr,
       false},
      {"--lwp-trace",
       &R::lwp_trace,
       "Write every LWP record stored from now on to FILE as JSON lines",
       {},
       nullptr,
       false},
      {"--perf-data",
       &R::perf_data,
       "Write the LWP records stored from now on as a perf.data FILE for Linux's perf tools (`perf "
       "report "
       "-i FILE`, `perf script`, `perf annotate`): one sample per record, with the task's ELF "
       "mapped so perf names functions and lines (--symbols' first file)",
       {},
       "FILE",
       false},
      {"--symbols",
       &R::symbols,
       "An ELF file whose functions, files and lines name the --lwp-report's addresses; may be "
       "given several times, the first that knows an address names it",
       {},
       "ELF",
       false},
      {"--kvm-device", &R::kvm_device, "The KVM device to open"},
      {"--api-socket",
       &R::api_socket,
       "Serve the HTTP API (DESIGN §4.10) on this Unix socket",
       {},
       nullptr,
       false},
      progress_row<R>(),
      {"--stats", &R::stats,
       "At exit, one line per vCPU on stderr (as `run --stats`; counted since the snapshot's "
       "boot)"},
  };
}

bool given(const CLI::App& app, const char* name) { return app.get_option(name)->count() > 0; }

// What `run`'s options and programs cannot be together; the one-line reason, or nullopt.
std::optional<std::string> check_run(const RunCommand& run, const CLI::App& app) {
  if (run.start_paused && run.api_socket.empty())
    return "--paused needs --api-socket (only vm.resume can start the VM)";
  if ((!run.pause_on_output.empty() || run.pause_at_instructions) && run.api_socket.empty())
    return std::string(run.pause_at_instructions ? "--pause-at-instructions"
                                                 : "--pause-on-output") +
           " needs --api-socket (only vm.resume can continue the VM)";
  for (const std::string& text : run.pause_on_output)
    if (text.empty()) return "--pause-on-output needs a text (every line contains the empty one)";
  if (!run.symbols.empty() && run.lwp_report.empty() && run.perf_data.empty())
    return "--symbols names the addresses of the LWP report or perf data: it goes with "
           "--lwp-report or --perf-data";
  if (run.incoming.empty() && (run.max_mem_mib || run.max_vcpus))
    return std::string(run.max_mem_mib ? "--max-mem" : "--max-vcpus") +
           " limits what an arriving VM may ask for: it goes with --incoming";
  if (!run.incoming.empty()) {
    // The arriving VM brings its machine: options that shape one would be silently ignored.
    for (const OptionRow<RunCommand>& row : run_options())
      if (row.shapes_machine && given(app, row.name))
        return std::string(row.name) +
               " cannot go with --incoming: the migrated VM brings its own machine";
    if (!run.programs.empty())
      return "--incoming takes no programs: the migrated VM brings its own";
    if (run.incoming.rfind("unix:", 0) != 0 || run.incoming.size() <= 5)
      return "--incoming needs unix:PATH, not " + run.incoming;
    return std::nullopt;
  }
  if (run.kernel.empty() && (!run.initrd.empty() || run.cmdline_given))
    return "--initrd and --cmdline need --kernel BZIMAGE (a Linux guest)";
  // With --kernel the file decides (main.cc): a bzImage takes no programs, an ELF kernel does.
  if (run.programs.empty() && run.kernel.empty())
    return "run needs at least one program after `--` (see pmuvm run --help)";
  for (const ProgramArgs& p : run.programs)
    if (p.path.empty()) return "empty program between `--` separators";
  return std::nullopt;
}

std::optional<std::string> check_restore(const RestoreCommand& restore, bool programs) {
  if (programs) return "restore takes no programs: the snapshot holds its own";
  if (restore.source.rfind("file:///", 0) != 0)
    return "--source needs file:///DIR, not " + restore.source;
  if (!restore.symbols.empty() && restore.lwp_report.empty() && restore.perf_data.empty())
    return "--symbols names the addresses of the LWP report or perf data: it goes with "
           "--lwp-report or --perf-data";
  return std::nullopt;
}

// The subcommands' CLI11 apps, with what the checks after parsing need of them.
struct Subcommands {
  CLI::App* run;
  CLI::App* restore;
  CLI::App* profiles;
  CLI::App* ctl;
  CLI::Option* baseline;
  CLI::Option* check_migration;
  CLI::Option* ctl_body;
};

CLI::App* add_profiles(CLI::App& app, ProfilesCommand& profiles, Subcommands& sub) {
  CLI::App* cmd = app.add_subcommand(
      "profiles",
      "List the shipped CPU profiles, describe one, print a migration set's baseline "
      "(--baseline) or check a migration between two profiles (--check-migration)");
  cmd->add_option("profile", profiles.name, "A profile name or JSON file to describe");
  // Both take any number of values (also none, so a following option is never taken for a
  // value), and a wrong count gets our message (choose_profiles_mode), not CLI11's.
  auto profile_list = [&](const char* name, std::vector<std::string>& values, const char* type,
                          const char* help) {
    return cmd->add_option(name, values, help)
        ->type_name(type)
        ->expected(0, CLI::detail::expected_max_vector_size);
  };
  sub.baseline =
      profile_list("--baseline", profiles.baseline, "A B",
                   "Print the migration baseline of two or more profiles (names or files) as JSON, "
                   "cross-checked with libvirt");
  sub.check_migration = profile_list(
      "--check-migration", profiles.check_migration, "PROFILE",
      "FROM TO: may a guest that booted with profile FROM run with profile TO? Status 0 yes, 1 no");
  cmd->footer(kProfilesFooter);
  return cmd;
}

CLI::App* add_ctl(CLI::App& app, CtlCommand& ctl, std::string& body, Subcommands& sub) {
  CLI::App* cmd = app.add_subcommand(
      "ctl",
      "Call the API socket of a running pmuvm (`pmuvm run --api-socket PATH`) and print "
      "the answer");
  cmd->add_option("--api-socket", ctl.api_socket, "The API socket to call")
      ->type_name("PATH")
      ->required();
  cmd->add_option("verb", ctl.verb, "The endpoint: " + api::route_names())->required();
  sub.ctl_body = cmd->add_option("json", body, "Its JSON body");
  cmd->footer(ctl_footer());
  return cmd;
}

// Splits `argv` (without argv[0]) at the first "--": the options before it, the programs after.
std::pair<std::vector<std::string>, std::vector<std::string>> split_at_separator(
    const std::vector<std::string>& argv) {
  std::vector<std::string> before, after;
  bool separated = false;
  for (size_t i = 1; i < argv.size(); ++i) {
    if (!separated && argv[i] == "--") {
      separated = true;
      continue;
    }
    (separated ? after : before).push_back(argv[i]);
  }
  return {before, after};
}

// After parsing: the subcommand that was given, or a usage error for what cannot go together.
std::optional<std::string> finish(ParsedCommandLine& out, const Subcommands& sub,
                                  const std::vector<std::string>& after,
                                  const std::string& ctl_body) {
  using Kind = ParsedCommandLine::Kind;
  if (sub.run->parsed()) {
    RunCommand& run = out.run;
    run.programs = split_programs(after);
    run.cmdline_given = given(*sub.run, "--cmdline");
    run.cpu_given = given(*sub.run, "--cpu");
    run.host_counters_given = given(*sub.run, "--host-counters");
    run.double_skid_given = given(*sub.run, "--double-skid");
    run.skid_margin_given = given(*sub.run, "--skid-margin");
    if (auto error = check_run(run, *sub.run)) return error;
    out.kind = Kind::kRun;
  } else if (sub.restore->parsed()) {
    if (auto error = check_restore(out.restore, !after.empty())) return error;
    out.kind = Kind::kRestore;
  } else if (sub.profiles->parsed()) {
    if (auto error = choose_profiles_mode(out.profiles, sub.baseline->count() > 0,
                                          sub.check_migration->count() > 0, !after.empty()))
      return error;
    out.kind = Kind::kProfiles;
  } else if (sub.ctl->parsed()) {
    if (!after.empty()) return "ctl takes no `--`: VERB and its JSON body follow the options";
    if (sub.ctl_body->count() > 0) out.ctl.body = ctl_body;
    out.kind = Kind::kCtl;
  }
  return std::nullopt;
}

}  // namespace

ParsedCommandLine parse_command_line(const std::vector<std::string>& argv) {
  ParsedCommandLine out;
  const auto [before, after] = split_at_separator(argv);
  CLI::App app{
      "pmuvm — a KVM virtual machine monitor that gives guests virtual AMD Lightweight "
      "Profiling and a virtual Intel NetBurst PMU",
      "pmuvm"};  // the name the usage lines give ("Usage: pmuvm run [OPTIONS]")
  app.set_version_flag("--version", kPmuvmVersion, "Print which pmuvm this is and exit");
  app.require_subcommand(1);
  Subcommands sub{};
  sub.run = app.add_subcommand(
      "run",
      "Boot the guest kernel and run PROGRAM(s) as ring-3 tasks, or boot Linux (--kernel BZIMAGE)");
  add_options(*sub.run, out.run, run_options());
  sub.run->footer(kRunFooter);
  sub.restore = app.add_subcommand(
      "restore", "Resume a snapshot (written by the API's vm.snapshot) where it was taken");
  add_options(*sub.restore, out.restore, restore_options());
  sub.restore->get_option("--source")->required();
  sub.profiles = add_profiles(app, out.profiles, sub);
  std::string ctl_body;
  sub.ctl = add_ctl(app, out.ctl, ctl_body, sub);

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
  if (const std::optional<std::string> error = finish(out, sub, after, ctl_body)) {
    out.kind = ParsedCommandLine::Kind::kExit;
    out.exit_status = 2;
    out.message = "pmuvm: " + *error;
  }
  return out;
}

}  // namespace vmm
