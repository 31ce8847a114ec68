// `pmuvm` command line (DESIGN §4.6), parsed with CLI11:
//   pmuvm run [options] -- PROGRAM.elf [ARGS...] [-- PROGRAM2.elf [ARGS...] ...]
//   pmuvm run --kernel BZIMAGE [--initrd FILE] [--cmdline STR] [options]   (a Linux guest)
//   pmuvm run --incoming unix:PATH [--cpu PROFILE] [outputs]   (a live migration's destination)
//   pmuvm restore --source file:///DIR [--cpu PROFILE] [outputs]
//   pmuvm profiles [NAME|FILE]
//   pmuvm ctl --api-socket PATH VERB [JSON]   (a call to a running pmuvm's API socket)
//   pmuvm profiles --baseline A B [...]          (a migration set's baseline, as JSON)
//   pmuvm profiles --check-migration FROM TO     (DESIGN §4.10 verdict)
//   pmuvm --help
// Parsing is separate from running so tests can check every usage error without KVM.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "vmm/counting_kinds.h"
#include "vmm/machine/run_environment.h"
#include "vmm/machine_shape.h"

namespace vmm {

struct ProgramArgs {
  std::string path;
  std::vector<std::string> args;
};

// Beside its own options, the run's environment and pause points (vmm/machine/run_environment.h).
struct RunCommand : RunEnvironment, PausePoints, MachineShape {
  std::string cpu = "amd-lwp";
  // How it counts (vmm/counting_kinds.h; DESIGN §4.7, §4.11): the backend, the
  // stepper, and the host backend's counters, the double's skid, the skid margin.
  BackendKind backend = BackendKind::kAuto;
  StepperKind stepper = StepperKind::kAuto;
  HostCountersKind host_counters = HostCountersKind::kPerf;
  uint64_t double_skid = 0;
  uint64_t skid_margin = 128;
  bool host_counters_given = false, double_skid_given = false, skid_margin_given = false;
  std::string kernel;  // "" = the bundled kernel; an ELF kernel or a Linux bzImage
  std::string initrd;  // Linux only (DESIGN §4.9)
  std::string cmdline = "console=ttyS0";  // Linux only
  bool cmdline_given = false;
  std::string log_level = "warn";
  std::vector<ProgramArgs> programs;
  // A live migration's destination (DESIGN §4.10): "unix:PATH"; the machine comes from the
  // source, so no kernel, programs or machine-shape options go with it.
  std::string incoming;
  // --incoming: the most memory and vCPUs an arriving VM may ask for (0: the host's RAM, and
  // limits::kMaxVcpus).
  std::optional<uint64_t> max_mem_mib;
  std::optional<uint64_t> max_vcpus;
  bool cpu_given = false;          // --cpu given: the destination's profile the VM must fit
  uint64_t debug_pause_every = 0;  // debug: pause and resume the VM every N exits of vCPU 0
};

// `pmuvm restore`: resume a snapshot (DESIGN §4.10).
struct RestoreCommand : RunEnvironment {
  std::string source;  // "file:///DIR"
  std::string cpu;     // "" = the snapshot's own profile; else the profile the VM must fit
  std::string log_level = "warn";
};

struct ProfilesCommand {
  enum class Mode { kList, kDescribe, kBaseline, kCheckMigration } mode = Mode::kList;
  std::string name;                          // kDescribe: the profile name or file
  std::vector<std::string> baseline;         // kBaseline: two or more names or files
  std::vector<std::string> check_migration;  // kCheckMigration: FROM, TO
};

// One call to the API socket of a running pmuvm (vmm/cli/ctl.h runs it).
struct CtlCommand {
  std::string api_socket;
  std::string verb;                 // the endpoint's name: vm.pause, vm.snapshot, ...
  std::optional<std::string> body;  // the JSON body, as given
};

struct ParsedCommandLine {
  enum class Kind { kRun, kRestore, kProfiles, kCtl, kExit } kind = Kind::kExit;
  RunCommand run;
  RestoreCommand restore;
  ProfilesCommand profiles;
  CtlCommand ctl;
  int exit_status = 0;  // for kExit: 0 after --help, 2 after a usage error
  std::string message;  // for kExit: what to print (help text or the one-line error)
};

ParsedCommandLine parse_command_line(const std::vector<std::string>& argv);

}  // namespace vmm
