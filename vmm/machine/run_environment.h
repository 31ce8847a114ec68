// The options a run shares with the command that starts it: what it talks to and writes
// (RunEnvironment: the same for `run`, `restore` and an incoming migration) and where the VM
// pauses itself (PausePoints: `run` and an incoming migration). The commands (vmm/cli/) and
// MachineOptions both are these, so a command hands them over in one assignment.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vmm {

struct RunEnvironment {
  std::string kvm_device = "/dev/kvm";
  std::string api_socket;  // "" = none; else the HTTP API's Unix socket (DESIGN §4.10)
  std::string lwp_report;  // "" = none, "-" = stdout, else a file
  std::string lwp_trace;   // "" = none, else a JSON-lines file
  // ELF files naming the report's addresses of tasks that are not one of the bundled kernel's
  // programs (--symbols).
  std::vector<std::string> symbols;
  std::string perf_data;          // "" = none, else the perf.data file to write (--perf-data)
  bool stats = false;             // at exit, one line per vCPU on stderr (DESIGN §4.6 --stats)
  std::string progress = "auto";  // the progress line on stderr: auto, always, never
};

// Points at which the VM pauses itself until vm.resume (vmm/progress_pauses.h; they need an
// API socket).
struct PausePoints {
  bool start_paused = false;  // every vCPU parked before its first instruction
  std::vector<std::string> pause_on_output;
  std::optional<uint64_t> pause_at_instructions;
};

}  // namespace vmm
