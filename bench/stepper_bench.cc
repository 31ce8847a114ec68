// The precise backend's steppers against raw KVM single-stepping, and block stepping against one
// exit per instruction, measured side by side in one run on the same host. Needs /dev/kvm; where
// there is none:
//   bazel build -c opt //bench:stepper_bench //vmm:pmuvm //guest/programs:all
//     //guest_kernel_patches:bzImage //guest/linux:initramfs_perf &&
//     tools/kvm-host/run -- bazel-bin/bench/stepper_bench
// Prints:
//  (1) the raw single-step exit rate of a minimal KVM program: pmuvm's KVM layer, a CPL-0 nop
//      loop, KVM_GUESTDBG_SINGLESTEP set once, nothing but KVM_RUN and a check per step;
//  (2) for each stepper (kvm: block stepping, kvm-single, guest), `pmuvm run --stats --stepper S
//      -- lwp_demo 1 0 timed`: wall time, VM exits and counting stops (from --stats), CPL-3
//      instructions counted, exits per counted instruction, and exits per second over the whole
//      run (boot included, so a lower bound) as a ratio of (1);
//  (3) instructions per second of lwp_demo's compute phases profiled (each stepper) vs
//      unprofiled (`lwp_demo 100 0 unprofiled`: no LLWPCB, nothing stepped, 100 times the work,
//      divided by 100), as the ratio of the TSC ticks the guest measured around the same
//      instructions;
//  (4) block stepping on loops of known basic blocks (guest/programs/block_loops.c): (a) dec/jnz,
//      2 instructions per block, (b) a 20-instruction straight line: the stepper's stops (debug
//      exits) per counted instruction against the goal 1.2 x 1 / block length (and <= 0.1 for
//      (b)), and the loop's TSC ticks under kvm-single / under kvm (goal for (b): >= 5);
//  (5) (c) a real Linux program, Debian's busybox sorting a generated file (guest/linux/
//      sort_check) under Debian's perf stat on intel-netburst: its user instructions and branches
//      as perf counted them (mean basic block = instructions / branches), and the stepper's stops
//      per counted instruction against 1.2 / mean basic block. Skipped with a line saying so when
//      the Linux kernel or initramfs is not built.
//  (6) the host backend (DESIGN §4.11) through its counter double, on lwp_demo under amd-lwp-lite
//      (instructions retired every 4096: the only LWP event a host counter counts exactly) and
//      netburst_sampler (instr_retired PMIs every 1000): exits per counted instruction of the
//      precise backend, and those a host PMU would have (--stats: the double's free runs
//      replaced by one kick each) for skids 0, 64 and the margin 128 (0, 8 and the margin 16 for
//      NetBurst, whose 1000-instruction period leaves less room); the expectation is about one
//      kick plus the block steps between the overflow's arrival and the event per interval;
//  (7) --stepper emulate (issue 40) beside kvm and kvm-single on lwp_demo under amd-lwp-lite
//      (instructions retired: counts only, what the emulator runs), SCALE 1 and 10. (5) runs
//      under emulate too. What the emulator core does on the host outside any VM, natively
//      and emulated: bench/emulator_bench.
// STEPPER_BENCH_ROWS=5,7 runs only those rows ((1)-(3) are one group: any of them runs all three).
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <array>
#include <fstream>
#include <map>
#include <regex>
#include <cstdlib>
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
  long long emulated = 0;  // --stepper emulate: instructions the emulator ran
  std::string error;
};

// What one pmuvm process printed, and how long it took.
struct Spawned {
  double seconds = 0;
  std::string out, err, error;
};

Spawned spawn(std::vector<std::string> argv) {
  Spawned r;
  const std::string err_path = "/tmp/stepper_bench." + std::to_string(getpid()) + ".err";
  const std::string out_path = "/tmp/stepper_bench." + std::to_string(getpid()) + ".out";
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
    r.error = "cannot start " + argv[0];
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
  std::ifstream out_file(out_path);
  std::stringstream out;
  out << out_file.rdbuf();
  unlink(out_path.c_str());
  r.err = text.str();
  r.out = out.str();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) r.error = "pmuvm failed: " + r.err;
  return r;
}

// The stepper's stops: debug exits, from --stats' second line (the KVM stepper's).
long long debug_exits(const std::string& err) {
  std::smatch m;
  if (std::regex_search(err, m, std::regex(R"(exits by kind: debug (\d+))")))
    return std::stoll(m[1]);
  return -1;
}

// The instructions --stepper emulate ran, from --stats' emulator line (0: none, or no line).
long long emulated_instructions(const std::string& err) {
  std::smatch m;
  if (std::regex_search(err, m, std::regex(R"(emulator: emulated instructions (\d+))")))
    return std::stoll(m[1]);
  return 0;
}

PmuvmRun run_pmuvm(const std::string& pmuvm, const std::string& program, const std::string& stepper,
                   const std::string& mode, const std::string& scale = "1",
                   const std::string& cpu = "amd-lwp") {
  PmuvmRun r;
  const Spawned p = spawn({pmuvm, "run", "--stats", "--cpu", cpu, "--stepper", stepper, "--",
                           program, scale, "0", mode});
  r.seconds = p.seconds;
  r.error = p.error;
  std::smatch m;
  const std::string& s = p.err;
  const std::string& o = p.out;
  // --stats (DESIGN §4.6): every VM exit, the stops that counted one instruction or a block,
  // and the counted instructions.
  if (std::regex_search(
          s, m,
          std::regex(
              R"(vcpu0: exits (\d+), single steps (\d+), blocks (\d+), counted instructions (\d+))"))) {
    r.exits = std::stoll(m[1]);
    r.steps = std::stoll(m[2]) + std::stoll(m[3]);
    r.counted = std::stoll(m[4]);
  } else if (mode != "unprofiled" && r.error.empty()) {
    r.error = "no --stats line in pmuvm's output";
  }
  r.emulated = emulated_instructions(s);
  if (std::regex_search(o, m, std::regex(R"(compute phases took (\d+) TSC ticks)")))
    r.ticks = std::stoll(m[1]);
  else if (r.error.empty())
    r.error = "no 'compute phases took' line in the program's output";
  return r;
}

// (4): block_loops SHAPE under kvm and kvm-single.
void block_loops(const std::string& pmuvm, const std::string& program) {
  std::printf(
      "(4) block_loops SHAPE N under --stepper kvm (blocks) and kvm-single (the loop's TSC "
      "ticks; stops = debug exits over the whole run)\n");
  struct Shape {
    const char* name;
    const char* iterations;
    double block, goal;
  };
  for (const Shape& shape :
       {Shape{"tight", "20000", 2, 1.2 / 2}, Shape{"straight", "5000", 20, 0.1}}) {
    double ticks[2] = {0, 0};
    int i = 0;
    for (const char* stepper : {"kvm", "kvm-single"}) {
      const Spawned p = spawn({pmuvm, "run", "--stats", "--stepper", stepper, "--", program,
                               shape.name, shape.iterations});
      std::smatch m;
      long long counted = -1;
      if (std::regex_search(p.err, m, std::regex(R"(counted instructions (\d+))")))
        counted = std::stoll(m[1]);
      if (std::regex_search(p.out, m, std::regex(R"(the loop took (\d+) TSC ticks)")))
        ticks[i] = std::stod(m[1]);
      const long long stops = debug_exits(p.err);
      if (!p.error.empty() || counted <= 0 || stops < 0 || ticks[i] <= 0) {
        std::printf("  %-8s %-10s FAILED: %s\n", shape.name, stepper, p.error.c_str());
        ++i;
        continue;
      }
      std::printf(
          "  %-8s %-10s %7.2f s  %8lld counted  %8lld stops  stops/counted %.3f%s  "
          "loop %.0f ticks\n",
          shape.name, stepper, p.seconds, counted, stops, static_cast<double>(stops) / counted,
          i == 0 ? (" (goal <= " + std::to_string(shape.goal).substr(0, 4) + ")").c_str() : "",
          ticks[i]);
      ++i;
    }
    if (ticks[0] > 0 && ticks[1] > 0)
      std::printf("  %-8s loop time kvm-single / kvm = %.2f%s\n", shape.name, ticks[1] / ticks[0],
                  std::string(shape.name) == "straight" ? " (goal >= 5)" : "");
  }
}

// (5): (c), a real Linux program under perf stat, stepped (kvm) and emulated (emulate).
void linux_program(const std::string& pmuvm, const std::string& kernel, const std::string& initrd) {
  if (access(kernel.c_str(), R_OK) != 0 || access(initrd.c_str(), R_OK) != 0) {
    std::printf("(5) skipped: %s or %s is not built\n", kernel.c_str(), initrd.c_str());
    return;
  }
  double kvm_seconds = 0, kvm_workload = 0, kvm_instructions = -1, kvm_branches = -1;
  for (const char* stepper : {"kvm", "emulate"}) {
    const Spawned p =
        spawn({pmuvm, "run", "--stats", "--stepper", stepper, "--cpu", "intel-netburst", "--mem",
               "512", "--kernel", kernel, "--initrd", initrd, "--cmdline",
               "console=ttyS0 nmi_watchdog=0 quiet norandmaps -- perf stat -x ; -e instructions:u "
               "-e r52001e0000000000:u busybox sh /etc/sort_check"});
    std::smatch m;
    double instructions = -1, branches = -1, workload = -1;
    // perf stat -x: count;unit;event;time the counter ran (ns: the workload's own time, without
    // the guest's boot);...
    if (std::regex_search(p.out, m, std::regex(R"((\d+);;instructions:u;(\d+);)"))) {
      instructions = std::stod(m[1]);
      workload = std::stod(m[2]) / 1e9;
    }
    if (std::regex_search(p.out, m, std::regex(R"((\d+);;r52001e0000000000:u;)")))
      branches = std::stod(m[1]);
    const long long stops = debug_exits(p.err);
    if (!p.error.empty() || instructions <= 0 || branches <= 0 || stops < 0) {
      std::printf("(5) %s FAILED: %s%s\n", stepper, p.error.c_str(), p.out.c_str());
      continue;
    }
    const double block = instructions / branches;
    if (std::string(stepper) == "kvm") {
      kvm_seconds = p.seconds, kvm_workload = workload;
      kvm_instructions = instructions, kvm_branches = branches;
    } else if (instructions != kvm_instructions || branches != kvm_branches) {
      std::printf("(5) %s counted otherwise than kvm: %.0f instructions, %.0f branches\n", stepper,
                  instructions, branches);
    }
    std::printf(
        "(5) (c) busybox seq | sort -rn | md5sum under perf stat, intel-netburst, --stepper %s: "
        "%.2f s, %.0f user instructions, %.0f branches (mean basic block %.2f), %lld stops: "
        "stops/counted %.3f (goal for kvm <= 1.2 / %.2f = %.3f); emulated %.0f; the workload "
        "alone (perf's counter time) %.2f s; kvm / this %.2f x (the workload alone %.2f x)\n",
        stepper, p.seconds, instructions, branches, block, stops, stops / instructions, block,
        1.2 / block, static_cast<double>(emulated_instructions(p.err)), workload,
        kvm_seconds > 0 ? kvm_seconds / p.seconds : 0.0,
        kvm_workload > 0 ? kvm_workload / workload : 0.0);
  }
}

// (7): --stepper emulate (issue 40) where the models need counts only: lwp_demo under
// amd-lwp-lite (instructions retired), SCALE 1 and 10, emulate beside kvm and kvm-single. The
// compute phases' TSC ticks; the difference between SCALE 10 and 1 is what the work costs
// without what each run pays once (the emulator's first translations and mappings).
void emulated_counting(const std::string& pmuvm, const std::string& program) {
  std::printf("(7) --stepper emulate, %s SCALE 0 timed under amd-lwp-lite: compute-phase ticks\n",
              program.c_str());
  std::map<std::string, std::array<double, 2>> ticks;
  for (const char* scale : {"1", "10"})
    for (const char* stepper : {"emulate", "kvm", "kvm-single"}) {
      const PmuvmRun r = run_pmuvm(pmuvm, program, stepper, "timed", scale, "amd-lwp-lite");
      if (!r.error.empty()) {
        std::printf("  %-10s SCALE %-2s FAILED: %s\n", stepper, scale, r.error.c_str());
        continue;
      }
      ticks[stepper][std::string(scale) == "1" ? 0 : 1] = static_cast<double>(r.ticks);
      std::printf(
          "  %-10s SCALE %-2s %7.2f s  %12lld ticks  %9lld exits  %9lld of %lld counted "
          "emulated\n",
          stepper, scale, r.seconds, r.ticks, r.exits, r.emulated, r.counted);
    }
  const auto& e = ticks["emulate"];
  for (const char* other : {"kvm", "kvm-single"}) {
    const auto& o = ticks[other];
    if (e[0] > 0 && e[1] > e[0] && o[0] > 0)
      std::printf(
          "  %s / emulate: SCALE 1 %.2f x, SCALE 10 %.2f x, the work alone (10 - 1) %.2f x\n",
          other, o[0] / e[0], o[1] / e[1], (o[1] - o[0]) / (e[1] - e[0]));
  }
}

// (6): the host backend through the counter double against the precise backend.
void host_backend(const std::string& pmuvm, const std::string& programs) {
  std::printf("(6) host backend, counter double (exits a host PMU would have; DESIGN §4.11)\n");
  struct Case {
    const char* what;
    std::vector<std::string> cpu_and_margin;
    std::vector<std::string> program;
    long long interval;
    std::vector<std::string> skids;  // up to the margin
  };
  const Case cases[] = {
      {"lwp_demo, amd-lwp-lite",
       {"--cpu", "amd-lwp-lite", "--skid-margin", "128"},
       {programs + "lwp_demo", "1", "0", "timed"},
       4096,
       {"0", "64", "128"}},
      {"netburst_sampler 400 1000, intel-netburst",
       {"--cpu", "intel-netburst", "--skid-margin", "16"},
       {programs + "netburst_sampler", "400", "1000"},
       1000,
       {"0", "8", "16"}},
  };
  for (const Case& c : cases) {
    auto args = [&](std::vector<std::string> backend) {
      std::vector<std::string> a = {pmuvm, "run", "--stats", c.cpu_and_margin[0],
                                    c.cpu_and_margin[1]};
      a.insert(a.end(), backend.begin(), backend.end());
      a.push_back("--");
      a.insert(a.end(), c.program.begin(), c.program.end());
      return a;
    };
    const Spawned precise = spawn(args({"--backend", "precise"}));
    std::smatch m;
    long long exits = -1, counted = -1;
    if (std::regex_search(precise.err, m,
                          std::regex(R"(vcpu0: exits (\d+), .* counted instructions (\d+))"))) {
      exits = std::stoll(m[1]);
      counted = std::stoll(m[2]);
    }
    if (!precise.error.empty() || counted <= 0) {
      std::printf("  %s: precise run FAILED: %s\n", c.what, precise.error.c_str());
      continue;
    }
    std::printf("  %s: precise %.2f s, %lld exits / %lld counted = %.4f\n", c.what, precise.seconds,
                exits, counted, static_cast<double>(exits) / counted);
    for (const std::string& skid : c.skids) {
      const Spawned d =
          spawn(args({"--backend", "host", "--host-counters", "double", "--double-skid", skid,
                      c.cpu_and_margin[2], c.cpu_and_margin[3]}));
      if (!d.error.empty() ||
          !std::regex_search(
              d.err, m,
              std::regex(
                  R"(host backend: free runs (\d+), ended by overflow (\d+), unseen instructions (\d+), overshoots (\d+), exits with a host PMU (\d+) \(([0-9.]+) per counted)"))) {
        std::printf("    skid %-4s FAILED: %s\n", skid.c_str(),
                    d.error.empty() ? "no host backend line" : d.error.c_str());
        continue;
      }
      const long long pmu_exits = std::stoll(m[5]);
      std::printf(
          "    skid %-4s %lld overflows, %lld of %lld instructions unseen, %lld overshot: "
          "%lld exits with a host PMU = %s per counted (precise / host %.1f; one kick per "
          "%lld-instruction interval alone would be %.5f)\n",
          skid.c_str(), std::stoll(m[2]), std::stoll(m[3]), counted, std::stoll(m[4]), pmu_exits,
          m[6].str().c_str(), static_cast<double>(exits) / pmu_exits, c.interval, 1.0 / c.interval);
    }
  }
}

}  // namespace

// Whether row `n` was asked for (STEPPER_BENCH_ROWS, a comma-separated list; all by default).
bool row_wanted(int n) {
  const char* rows = std::getenv("STEPPER_BENCH_ROWS");
  if (rows == nullptr || *rows == '\0') return true;
  std::stringstream list(rows);
  for (std::string item; std::getline(list, item, ',');)
    if (item == std::to_string(n)) return true;
  return false;
}

int main(int argc, char** argv) try {
  const std::string pmuvm = argc > 1 ? argv[1] : "bazel-bin/vmm/pmuvm";
  const std::string program = argc > 2 ? argv[2] : "bazel-bin/guest/programs/lwp_demo";
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::stringstream ci;
  ci << cpuinfo.rdbuf();
  std::printf("stepper_bench — %s\n", ci.str().find("QEMU Virtual CPU") != std::string::npos
                                          ? "nested KVM host (QEMU/TCG): compare ratios only"
                                          : "direct /dev/kvm");
  if (row_wanted(1) || row_wanted(2) || row_wanted(3)) {
    // The raw rate is measured before and after the pmuvm runs (the nested host's speed drifts);
    // their mean is the reference, and both are printed so a drift shows.
    const double raw_before = raw_steps_per_second(3.0);
    // Unprofiled, the phases take milliseconds: run them 100 times over (SCALE 100; the work is
    // linear in SCALE) so that first-touch page faults and host noise do not decide the ratio.
    constexpr int kUnprofiledScale = 100;
    PmuvmRun unprofiled =
        run_pmuvm(pmuvm, program, "kvm", "unprofiled", std::to_string(kUnprofiledScale));
    if (unprofiled.ticks > 0) unprofiled.ticks /= kUnprofiledScale;
    std::vector<std::pair<std::string, PmuvmRun>> runs;
    for (const char* stepper : {"kvm", "kvm-single", "guest"})
      runs.emplace_back(stepper, run_pmuvm(pmuvm, program, stepper, "timed"));
    const double raw_after = raw_steps_per_second(3.0);
    const double raw = (raw_before + raw_after) / 2;

    std::printf(
        "(1) raw KVM single-step, CPL-0 nop loop, KVM_SET_GUEST_DEBUG once: %.0f steps/s before, "
        "%.0f after, mean %.0f (%.1f µs/step)\n",
        raw_before, raw_after, raw, 1e6 / raw);
    std::printf("(2) pmuvm run --stepper S -- %s 1 0 timed (whole run: boot, stepping, exit)\n",
                program.c_str());
    for (const auto& [stepper, r] : runs) {
      if (!r.error.empty()) {
        std::printf("  %-10s FAILED: %s\n", stepper.c_str(), r.error.c_str());
        continue;
      }
      const double exits = static_cast<double>(r.exits);
      std::printf(
          "  %-10s %7.2f s  %9lld exits, %9lld counting stops  %9lld counted  "
          "exits/counted %.3f  %7.0f exits/s = %.2f x raw\n",
          stepper.c_str(), r.seconds, r.exits, r.steps, r.counted, exits / r.counted,
          exits / r.seconds, exits / r.seconds / raw);
    }
    if (!unprofiled.error.empty())
      std::printf("  unprofiled run FAILED: %s\n", unprofiled.error.c_str());
    std::printf(
        "(3) lwp_demo compute phases, TSC ticks: unprofiled %lld (SCALE %d, divided by %d)\n",
        unprofiled.ticks, kUnprofiledScale, kUnprofiledScale);
    for (const auto& [stepper, r] : runs)
      if (r.error.empty())
        std::printf(
            "  %-10s profiled %lld ticks: instructions/s profiled / unprofiled = 1 / %.0f\n",
            stepper.c_str(), r.ticks,
            unprofiled.ticks > 0 ? static_cast<double>(r.ticks) / unprofiled.ticks : 0.0);
  }
  if (row_wanted(4)) block_loops(pmuvm, program.substr(0, program.rfind('/') + 1) + "block_loops");
  if (row_wanted(5))
    linux_program(pmuvm, argc > 3 ? argv[3] : "bazel-bin/guest_kernel_patches/bzImage",
                  argc > 4 ? argv[4] : "bazel-bin/guest/linux/initramfs_perf.cpio");
  if (row_wanted(6)) host_backend(pmuvm, program.substr(0, program.rfind('/') + 1));
  if (row_wanted(7)) emulated_counting(pmuvm, program);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "stepper_bench: %s\n", e.what());
  return 1;
}
