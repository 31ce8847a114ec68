// The precise backend's steppers against raw KVM single-stepping, measured side by side in one run
// on the same host (issue 9, item 6). Needs /dev/kvm; where there is none:
//   bazel build -c opt //bench:stepper_bench //vmm:pmuvm //guest/programs:lwp_demo &&
//     tools/kvm-host/run -- bazel-bin/bench/stepper_bench
// Prints:
//  (1) the raw single-step exit rate of a minimal KVM program: pmuvm's KVM layer, a CPL-0 nop
//      loop, KVM_GUESTDBG_SINGLESTEP set once, nothing but KVM_RUN and a check per step;
//  (2) for each stepper, `pmuvm run --stats --stepper S -- lwp_demo 1 0 timed`: wall time, VM
//      exits and counting stops (from --stats), CPL-3 instructions counted, exits per counted
//      instruction, and exits per second over the whole run (boot included, so a lower bound) as
//      a ratio of (1);
//  (3) instructions per second of lwp_demo's compute phases profiled (each stepper) vs
//      unprofiled (`lwp_demo 100 0 unprofiled`: no LLWPCB, nothing stepped, 100 times the work,
//      divided by 100), as the ratio of the TSC ticks the guest measured around the same
//      instructions.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "bench/scratch_vm.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

double raw_steps_per_second(double seconds) {
  std::vector<uint8_t> code(64, 0x90);  // 62 nops, then jmp to the start
  code[62] = 0xEB;
  code[63] = static_cast<uint8_t>(-64);
  bench::ScratchVm scratch(code, 0x200000);
  vmm::KvmVcpu& vcpu = scratch.vcpu;
  uint64_t steps = 0;
  const Clock::time_point t0 = Clock::now();
  kvm_guest_debug debug{};
  debug.control = KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_SINGLESTEP;
  vcpu.set_guest_debug(debug);  // once: in a nop loop nothing clears TF
  while (std::chrono::duration<double>(Clock::now() - t0).count() < seconds) {
    if (vcpu.run() < 0) continue;
    if (vcpu.run_state()->exit_reason != KVM_EXIT_DEBUG)
      throw std::runtime_error("unexpected exit " + std::to_string(vcpu.run_state()->exit_reason));
    ++steps;
  }
  return steps / std::chrono::duration<double>(Clock::now() - t0).count();
}

struct PmuvmRun {
  double seconds = 0;
  long long exits = 0, steps = 0, counted = -1, ticks = -1;
  std::string error;
};

PmuvmRun run_pmuvm(const std::string& pmuvm, const std::string& program, const std::string& stepper,
                   const std::string& mode, const std::string& scale = "1") {
  PmuvmRun r;
  const std::string err_path = "/tmp/stepper_bench." + std::to_string(getpid()) + ".err";
  const std::string out_path = "/tmp/stepper_bench." + std::to_string(getpid()) + ".out";
  std::vector<std::string> argv = {pmuvm, "run", "--stats", "--stepper", stepper,
                                   "--", program, scale, "0", mode};
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = 0;
  const Clock::time_point t0 = Clock::now();
  if (posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ) != 0) {
    r.error = "cannot start " + pmuvm;
    return r;
  }
  posix_spawn_file_actions_destroy(&fa);
  int status = 0;
  waitpid(pid, &status, 0);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  std::ifstream in(err_path);
  std::stringstream text;
  text << in.rdbuf();
  unlink(err_path.c_str());
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) r.error = "pmuvm failed: " + text.str();
  std::ifstream out_file(out_path);
  std::stringstream out;
  out << out_file.rdbuf();
  unlink(out_path.c_str());
  std::smatch m;
  const std::string s = text.str(), o = out.str();
  // --stats (DESIGN §4.6): every VM exit, the stops that each counted one instruction, and
  // the counted instructions.
  if (std::regex_search(s, m, std::regex(R"(vcpu0: exits (\d+), single steps (\d+), blocks \d+, counted instructions (\d+))"))) {
    r.exits = std::stoll(m[1]);
    r.steps = std::stoll(m[2]);
    r.counted = std::stoll(m[3]);
  } else if (mode != "unprofiled" && r.error.empty()) {
    r.error = "no --stats line in pmuvm's output";
  }
  if (std::regex_search(o, m, std::regex(R"(compute phases took (\d+) TSC ticks)")))
    r.ticks = std::stoll(m[1]);
  else if (r.error.empty())
    r.error = "no 'compute phases took' line in the program's output";
  return r;
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string pmuvm = argc > 1 ? argv[1] : "bazel-bin/vmm/pmuvm";
  const std::string program = argc > 2 ? argv[2] : "bazel-bin/guest/programs/lwp_demo";
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::stringstream ci;
  ci << cpuinfo.rdbuf();
  std::printf("stepper_bench — %s\n", ci.str().find("QEMU Virtual CPU") != std::string::npos
                                          ? "nested KVM host (QEMU/TCG): compare ratios only"
                                          : "direct /dev/kvm");
  // The raw rate is measured before and after the pmuvm runs (the nested host's speed drifts);
  // their mean is the reference, and both are printed so a drift shows.
  const double raw_before = raw_steps_per_second(3.0);
  // Unprofiled, the phases take milliseconds: run them 100 times over (SCALE 100; the work is
  // linear in SCALE) so that first-touch page faults and host noise do not decide the ratio.
  constexpr int kUnprofiledScale = 100;
  PmuvmRun unprofiled = run_pmuvm(pmuvm, program, "kvm", "unprofiled", std::to_string(kUnprofiledScale));
  if (unprofiled.ticks > 0) unprofiled.ticks /= kUnprofiledScale;
  std::vector<std::pair<std::string, PmuvmRun>> runs;
  for (const char* stepper : {"kvm", "guest"})
    runs.emplace_back(stepper, run_pmuvm(pmuvm, program, stepper, "timed"));
  const double raw_after = raw_steps_per_second(3.0);
  const double raw = (raw_before + raw_after) / 2;

  std::printf("(1) raw KVM single-step, CPL-0 nop loop, KVM_SET_GUEST_DEBUG once: %.0f steps/s before, "
              "%.0f after, mean %.0f (%.1f µs/step)\n", raw_before, raw_after, raw, 1e6 / raw);
  std::printf("(2) pmuvm run --stepper S -- %s 1 0 timed (whole run: boot, stepping, exit)\n",
              program.c_str());
  for (const auto& [stepper, r] : runs) {
    if (!r.error.empty()) {
      std::printf("  %-5s FAILED: %s\n", stepper.c_str(), r.error.c_str());
      continue;
    }
    const double exits = static_cast<double>(r.exits);
    std::printf("  %-5s %7.2f s  %9lld exits, %9lld counting stops  %9lld counted  "
                "exits/counted %.3f (goal <= 1.05)  %7.0f exits/s = %.2f x raw (goal >= 0.8)\n",
                stepper.c_str(), r.seconds, r.exits, r.steps, r.counted, exits / r.counted,
                exits / r.seconds, exits / r.seconds / raw);
  }
  if (!unprofiled.error.empty()) std::printf("  unprofiled run FAILED: %s\n", unprofiled.error.c_str());
  std::printf("(3) lwp_demo compute phases, TSC ticks: unprofiled %lld (SCALE %d, divided by %d)\n",
              unprofiled.ticks, kUnprofiledScale, kUnprofiledScale);
  for (const auto& [stepper, r] : runs)
    if (r.error.empty())
      std::printf("  %-5s profiled %lld ticks: instructions/s profiled / unprofiled = 1 / %.0f\n",
                  stepper.c_str(), r.ticks,
                  unprofiled.ticks > 0 ? static_cast<double>(r.ticks) / unprofiled.ticks : 0.0);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "stepper_bench: %s\n", e.what());
  return 1;
}
