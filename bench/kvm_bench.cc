// What pmuvm costs on a real KVM host, measured side by side in one run against the smallest
// thing KVM can do (bench/ policy: ratios in one run, absolute figures beside them):
//  (a) wall time of the process `pmuvm run -- hello` vs a minimal KVM process (this binary with
//      --minimal-vm: open /dev/kvm, one VM, one 4 KiB slot, one vCPU, real-mode `hlt`, exit;
//      raw ioctls, no pmuvm code), interleaved, median, both exec'ed from copies in memory (the
//      nested KVM host's 9p root reads a binary's pages again at every exec, which a host's page
//      cache does not; pmuvm exec'ed from its file is printed for scale); and where pmuvm's time
//      goes: runs of `pmuvm run --stats -- hello` split by its timeline line
//      (vmm/startup_timeline.h) into process start, options, guest load, KVM set-up, guest run,
//      teardown and exit;
//  (b) one trapped WRMSR of LWPMSR1 (0xC0000106) handled by pmuvm's own code (VcpuPmu::
//      write_msr, reached exactly as vmm/machine/vcpu_exits.cc reaches it) vs a bare PIO exit with
//      a trivial handler, per exit, median of rounds;
//  (c) pmuvm's peak RSS (ru_maxrss from wait4) with the default guest RAM and with --mem 1024.
//
//   bazel build -c opt //bench:kvm_bench //vmm:pmuvm //guest/programs:hello &&
//     tools/kvm-host/run -- bazel-bin/bench/kvm_bench
//
// Needs /dev/kvm (exit 1 with one line otherwise); tools/kvm-host/run provides one where the
// machine has none (a nested QEMU/TCG AMD-SVM host, DESIGN §4.8). The output says which it was.
// Goals are printed as met / NOT met and do not change the exit status: 0 when everything was
// measured, 1 when a part could not be (its FAILED line says why), 2 for a bad option.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "pmu/interrupt_sink.h"
#include "bench/scratch_vm.h"
#include "vmm/boot/long_mode.h"
#include "vmm/cli/command_line.h"
#include "vmm/cpu/cpu_profile.h"
#include "vmm/kvm/kvm_abi.h"
#include "vmm/kvm/kvm_system.h"
#include "vmm/kvm/kvm_vcpu.h"
#include "vmm/kvm/kvm_vm.h"
#include "vmm/memory/guest_ram.h"
#include "vmm/vpmu/vcpu_pmu.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string join_ms(const std::vector<double>& seconds) {
  std::string s;
  char buf[32];
  for (double x : seconds) {
    std::snprintf(buf, sizeof buf, "%s%.1f", s.empty() ? "" : " ", x * 1e3);
    s += buf;
  }
  return s;
}

const char* verdict(bool met) { return met ? "met" : "NOT met"; }

// ---------------------------------------------------------------------------------------------
// --minimal-vm: the reference process of (a). Raw ioctls only; nothing of pmuvm's KVM layer.
// kvm_abi.h is only <linux/kvm.h> with the C++ flexible-array fix; none of the structs used here
// has a flexible array.
int minimal_vm() {
  auto fail = [](const char* what) {
    std::fprintf(stderr, "kvm_bench --minimal-vm: %s: %s\n", what, std::strerror(errno));
    return 1;
  };
  const int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (kvm < 0) return fail("open /dev/kvm");
  const int vm = ioctl(kvm, KVM_CREATE_VM, 0);
  if (vm < 0) return fail("KVM_CREATE_VM");
  void* mem = mmap(nullptr, 0x1000, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return fail("mmap");
  static_cast<uint8_t*>(mem)[0] = 0xF4;  // hlt
  kvm_userspace_memory_region region{};
  region.slot = 0;
  region.guest_phys_addr = 0x1000;
  region.memory_size = 0x1000;
  region.userspace_addr = reinterpret_cast<uint64_t>(mem);
  if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) < 0) return fail("KVM_SET_USER_MEMORY_REGION");
  const int vcpu = ioctl(vm, KVM_CREATE_VCPU, 0);
  if (vcpu < 0) return fail("KVM_CREATE_VCPU");
  const int run_size = ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE, 0);
  if (run_size <= 0) return fail("KVM_GET_VCPU_MMAP_SIZE");
  void* run_page = mmap(nullptr, run_size, PROT_READ | PROT_WRITE, MAP_SHARED, vcpu, 0);
  if (run_page == MAP_FAILED) return fail("mmap kvm_run");
  auto* run = static_cast<kvm_run*>(run_page);
  kvm_sregs sregs{};
  if (ioctl(vcpu, KVM_GET_SREGS, &sregs) < 0) return fail("KVM_GET_SREGS");
  sregs.cs.base = 0;
  sregs.cs.selector = 0;
  if (ioctl(vcpu, KVM_SET_SREGS, &sregs) < 0) return fail("KVM_SET_SREGS");
  kvm_regs regs{};
  regs.rip = 0x1000;
  regs.rflags = 0x2;
  if (ioctl(vcpu, KVM_SET_REGS, &regs) < 0) return fail("KVM_SET_REGS");
  for (;;) {
    if (ioctl(vcpu, KVM_RUN, 0) < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return fail("KVM_RUN");
    }
    if (run->exit_reason == KVM_EXIT_HLT) return 0;
    std::fprintf(stderr, "kvm_bench --minimal-vm: unexpected exit reason %u\n", run->exit_reason);
    return 1;
  }
}

// ---------------------------------------------------------------------------------------------
// Where this runs.
std::string read_file(const char* path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string cpu_model() {
  std::istringstream in(read_file("/proc/cpuinfo"));
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  return "unknown";
}

bool cpu_flag(const std::string& flag) {
  std::istringstream in(read_file("/proc/cpuinfo"));
  for (std::string line; std::getline(in, line);)
    if (line.rfind("flags", 0) == 0)
      return (line + " ").find(" " + flag + " ") != std::string::npos;
  return false;
}

std::string host_line() {
  const std::string model = cpu_model();
  const bool nested = read_file("/proc/cmdline").find("kvmhost.run=") != std::string::npos;
  const bool qemu_cpu = model.find("QEMU Virtual CPU") != std::string::npos;
  std::string where;
  if (nested)
    where =
        "inside tools/kvm-host's nested KVM host (QEMU/TCG AMD-SVM; kernel command line has "
        "kvmhost.run=): every figure includes TCG emulation, compare ratios only";
  else if (qemu_cpu)
    where =
        "on /dev/kvm of a QEMU-emulated CPU (not tools/kvm-host's marker, but the CPU is "
        "QEMU's): figures include QEMU's emulation";
  else
    where = "directly on this machine's /dev/kvm";
  return "host: " + where + "\n      CPU model \"" + model + "\"";
}

// ---------------------------------------------------------------------------------------------
// (a) and (c): child processes.
struct ChildRun {
  bool ok = false;   // exited 0
  std::string what;  // why not
  double seconds = 0;
  long maxrss_kib = 0;
  std::string out, err;
  Clock::time_point spawned, reaped;  // CLOCK_MONOTONIC (steady_clock), as pmuvm's timeline
};

std::string drain(int fd) {
  std::string s;
  lseek(fd, 0, SEEK_SET);
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) s.append(buf, n);
  return s;
}

// A copy of the executable at `path` in memory (a memfd), to exec as "/proc/self/fd/N" (the fd
// is inherited by children and read-only: a file open for writing cannot be exec'ed); `path`
// itself when it cannot be made, with `note` saying why. Why: the nested KVM host's root is
// virtio-9p with cache=mmap, which reads a file's pages over 9p again at every exec, so a 2 MB
// binary paid ~100 ms per start that a host with a local disk's page cache does not; both
// processes of (a) run from such copies, as both would from the page cache of a real host.
std::string in_memory_copy(const std::string& path, std::string& note) {
  const int in = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  const int mem = memfd_create("kvm_bench-exe", 0);
  bool ok = in >= 0 && mem >= 0;
  char buf[1 << 16];
  for (ssize_t n; ok && (n = read(in, buf, sizeof buf)) != 0;)
    ok = n > 0 && write(mem, buf, static_cast<size_t>(n)) == n;
  if (in >= 0) close(in);
  int exe = -1;
  if (ok) exe = open(("/proc/self/fd/" + std::to_string(mem)).c_str(), O_RDONLY);
  if (mem >= 0) close(mem);
  if (exe < 0) {
    note = "cannot copy " + path + " into memory (" + std::strerror(errno) + "): run from the file";
    return path;
  }
  return "/proc/self/fd/" + std::to_string(exe);
}

// Spawns argv with stdout/stderr into memory files, waits (at most timeout_s) and returns wall
// time from just before posix_spawn to just after wait4, and ru_maxrss.
ChildRun run_child(const std::vector<std::string>& argv, double timeout_s) {
  ChildRun r;
  const int out = memfd_create("kvm_bench-out", MFD_CLOEXEC);
  const int err = memfd_create("kvm_bench-err", MFD_CLOEXEC);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out, 1);
  posix_spawn_file_actions_adddup2(&fa, err, 2);
  pid_t pid = 0;
  const Clock::time_point t0 = Clock::now();
  r.spawned = t0;
  const int e = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (e != 0) {
    r.what = "cannot start " + argv[0] + ": " + std::strerror(e);
    close(out);
    close(err);
    return r;
  }
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(timeout_s * 1000)) == 0) {
      kill(pid, SIGKILL);
      r.what = "timed out after " + std::to_string(static_cast<int>(timeout_s)) + " s (killed)";
    }
    close(pidfd);
  }
  int status = 0;
  rusage ru{};
  while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {
  }
  r.reaped = Clock::now();
  r.seconds = std::chrono::duration<double>(r.reaped - t0).count();
  r.maxrss_kib = ru.ru_maxrss;
  r.out = drain(out);
  r.err = drain(err);
  close(out);
  close(err);
  if (!r.what.empty()) return r;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    r.ok = true;
  } else if (WIFEXITED(status)) {
    r.what = "exit status " + std::to_string(WEXITSTATUS(status));
  } else {
    r.what = std::string("killed by signal ") + strsignal(WTERMSIG(status));
  }
  return r;
}

// The nested KVM host's 9p root drops a file's pages once nobody has it open, so each exec read
// the shared libraries again (major faults at every start). This process keeps open, read once,
// every library the measured binaries load, for its whole run: what a host's page cache does for
// a library in use. The minimal process and pmuvm both profit.
void hold_shared_libraries(const std::string& exe, std::string& note) {
  setenv("LD_TRACE_LOADED_OBJECTS", "1", 1);
  const ChildRun listing = run_child({exe}, 60);
  unsetenv("LD_TRACE_LOADED_OBJECTS");
  std::istringstream lines(listing.out);
  int held = 0;
  for (std::string line; std::getline(lines, line);) {
    // "\tlibz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x...)" or "\t/lib64/ld-linux-x86-64.so.2
    // (0x...)"
    const size_t arrow = line.find("=> ");
    const size_t start = arrow != std::string::npos ? arrow + 3 : line.find('/');
    if (start == std::string::npos || start >= line.size() || line[start] != '/') continue;
    const size_t end = line.find(" (", start);
    if (end == std::string::npos) continue;
    const int fd = open(line.substr(start, end - start).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char buf[1 << 16];
    while (read(fd, buf, sizeof buf) > 0) {
    }
    ++held;  // the descriptor stays open until this process ends
  }
  if (held == 0 && note.empty()) note = "cannot list the shared libraries of " + exe;
}

// The last few lines of a child's output, indented, for a failure report.
std::string tail(const std::string& text, int lines = 6) {
  size_t pos = text.size();
  for (int i = 0; i <= lines && pos > 0; ++i) {
    pos = text.rfind('\n', pos - 1);
    if (pos == std::string::npos) {
      pos = 0;
      break;
    }
  }
  std::string t = text.substr(pos == 0 ? 0 : pos + 1), s;
  std::istringstream in(t);
  for (std::string line; std::getline(in, line);) s += "        | " + line + "\n";
  return s;
}

long self_rss_kib() {  // VmRSS of this process: the floor Linux carries into a child's ru_maxrss
  std::istringstream in(read_file("/proc/self/status"));
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return 0;
}

struct Series {
  std::string label;
  std::vector<std::string> argv;
  std::vector<double> seconds;
  std::vector<long> maxrss_kib;
  std::optional<ChildRun> failure;  // the first failed run
  std::vector<ChildRun> runs = {};  // kept for the breakdown's series only
};

// Where a `pmuvm run --stats` spent its wall time: its "pmuvm: timeline (CLOCK_MONOTONIC s):"
// line (vmm/startup_timeline.h) between this process's spawn and reap times. The phases, in
// order; empty when the line is missing or incomplete.
constexpr const char* kPhaseNames[] = {
    "process start (exec, dynamic loader, static constructors)",
    "command line, CPU profile, kernel and program files",
    "guest RAM mapped, images copied in",
    "KVM set-up (VM, vCPUs, registers, devices)",
    "guest run (boot, hello, shutdown)",
    "teardown (report, machine destroyed)",
    "exit (process end, KVM VM freed, reaped)",
};
std::vector<double> phases_of(const ChildRun& r) {
  const std::string key = "pmuvm: timeline (CLOCK_MONOTONIC s):";
  const size_t at = r.err.find(key);
  if (at == std::string::npos) return {};
  std::istringstream in(r.err.substr(at + key.size(), r.err.find('\n', at) - at - key.size()));
  std::vector<double> marks = {std::chrono::duration<double>(r.spawned.time_since_epoch()).count()};
  for (std::string name, value; in >> name >> value;) marks.push_back(std::stod(value));
  marks.push_back(std::chrono::duration<double>(r.reaped.time_since_epoch()).count());
  if (marks.size() != std::size(kPhaseNames) + 1) return {};
  std::vector<double> phases;
  for (size_t i = 1; i < marks.size(); ++i) phases.push_back(marks[i] - marks[i - 1]);
  return phases;
}

// ---------------------------------------------------------------------------------------------
// (b): WRMSR LWPMSR1 through pmuvm's handler vs a bare PIO exit, on pmuvm's own KVM layer.
constexpr uint32_t kMsrLwpcb = 0xC0000106;
constexpr uint16_t kPortRoundStart = 0x600, kPortMsrPhaseEnd = 0x601, kPortPio = 0x602,
                   kPortPioPhaseEnd = 0x603;
constexpr uint64_t kCodeGpa = 0x100000;

// LLWPCB 0 never raises interrupts; anything arriving here would be a model bug.
struct NoInterrupts : pmu::InterruptSink {
  int raised = 0;
  void deliver_vector(uint8_t) override { ++raised; }
  void deliver_nmi() override { ++raised; }
  void raise_performance_interrupt() override { ++raised; }
};

// 64-bit code, CPL 0, interrupts off; loops forever through three phases of N exits each:
//   top: out 0x600; N x wrmsr(ecx=0xC0000106, edx:eax=0)    pmuvm's handler
//        out 0x601; N x out 0x602                           trivial handler
//        out 0x603; N x wrmsr(ecx=0xC0000106, edx:eax=0)    trivial handler (KVM's own share)
//        jmp top
std::vector<uint8_t> exit_loop_code(uint32_t n) {
  std::vector<uint8_t> c;
  auto imm32 = [&c](uint32_t v) {
    for (int i = 0; i < 4; ++i) c.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  auto mov_dx = [&c](uint16_t port) {  // 66 BA iw
    c.insert(c.end(), {0x66, 0xBA, static_cast<uint8_t>(port), static_cast<uint8_t>(port >> 8)});
  };
  auto loop_back = [&c](size_t target) {  // dec ebx; jnz target
    c.insert(c.end(), {0xFF, 0xCB, 0x75});
    c.push_back(static_cast<uint8_t>(static_cast<int8_t>(target - (c.size() + 1))));
  };
  auto wrmsr_phase = [&] {
    c.push_back(0xB9), imm32(kMsrLwpcb);  // mov ecx, 0xC0000106
    c.insert(c.end(), {0x31, 0xC0});      // xor eax, eax
    c.insert(c.end(), {0x31, 0xD2});      // xor edx, edx
    c.push_back(0xBB), imm32(n);          // mov ebx, n
    const size_t loop = c.size();
    c.insert(c.end(), {0x0F, 0x30});  // wrmsr
    loop_back(loop);
  };
  const size_t top = c.size();
  mov_dx(kPortRoundStart);
  c.push_back(0xEE);  // out dx, al
  wrmsr_phase();
  mov_dx(kPortMsrPhaseEnd);
  c.push_back(0xEE);
  c.push_back(0xBB), imm32(n);
  mov_dx(kPortPio);
  const size_t pio_loop = c.size();
  c.push_back(0xEE);
  loop_back(pio_loop);
  mov_dx(kPortPioPhaseEnd);
  c.push_back(0xEE);
  wrmsr_phase();
  c.push_back(0xEB);  // jmp top
  c.push_back(static_cast<uint8_t>(static_cast<int8_t>(top - (c.size() + 1))));
  return c;
}

struct ExitCosts {
  std::vector<double> msr_us, pio_us, bare_msr_us;  // per exit, one value per round
  double sregs_us = 0, write_msr_us = 0;            // the handler's parts, timed outside KVM_RUN
  uint64_t msr_exits = 0, pio_exits = 0, bare_msr_exits = 0;
};

ExitCosts measure_exits(uint32_t n, int rounds) {
  const std::string cpu = vmm::RunCommand{}.cpu;  // pmuvm run's default --cpu (amd-lwp)
  vmm::Result<vmm::CpuProfile> profile = vmm::builtin_profile(cpu);
  if (!profile.ok())
    throw std::runtime_error("CPU profile " + cpu + ": " + profile.error().message);

  const std::vector<uint8_t> code = exit_loop_code(n);
  bench::ScratchVm scratch(code, kCodeGpa);
  vmm::KvmVcpu& vcpu = scratch.vcpu;
  scratch.vm.set_msr_filter({{0xC0000105, 2}});  // LWPMSR0/1, as in machine.cc
  NoInterrupts interrupts;
  vmm::VcpuPmu control(0, 0, profile->lwp, 1, scratch.ram, interrupts);

  kvm_run* run = vcpu.run_state();
  ExitCosts costs;
  Clock::time_point phase_start{};
  bool in_round = false, bare_msr_phase = false;
  int done = -1;  // rounds completed; the first is a warm-up and not counted
  while (done < rounds) {
    const int r = vcpu.run();
    run->immediate_exit = 0;
    if (r < 0) continue;
    switch (run->exit_reason) {
      case KVM_EXIT_X86_WRMSR: {
        // Exactly what Machine::Impl::handle_msr(v, /*write=*/true) does for an LWP MSR.
        if (run->msr.index != kMsrLwpcb || run->msr.reason != KVM_MSR_EXIT_REASON_FILTER)
          throw std::runtime_error("unexpected WRMSR exit: MSR " + std::to_string(run->msr.index));
        if (bare_msr_phase) {  // the trivial handler: accept the write, nothing else
          run->msr.error = 0;
          ++costs.bare_msr_exits;
          break;
        }
        const kvm_sregs s = vcpu.exit_sregs();
        const uint8_t cpl = s.ss.dpl;
        run->msr.error = 0;
        const vmm::MsrOutcome o = control.write_msr(run->msr.index, run->msr.data, cpl, s.cr3);
        run->msr.error = (!o.handled || o.general_protection) ? 1 : 0;
        if (run->msr.error)
          throw std::runtime_error("pmuvm's handler refused WRMSR LWPMSR1=0 at CPL " +
                                   std::to_string(cpl) + " (#GP)");
        ++costs.msr_exits;
        break;
      }
      case KVM_EXIT_IO: {
        if (run->io.direction != KVM_EXIT_IO_OUT) throw std::runtime_error("unexpected IN exit");
        const uint16_t port = run->io.port;
        if (port == kPortPio) {
          ++costs.pio_exits;  // the trivial handler
        } else if (port == kPortMsrPhaseEnd) {
          const Clock::time_point now = Clock::now();
          if (in_round && done >= 0)
            costs.msr_us.push_back(
                std::chrono::duration<double, std::micro>(now - phase_start).count() / n);
          phase_start = now;
        } else if (port == kPortPioPhaseEnd) {
          const Clock::time_point now = Clock::now();
          if (in_round && done >= 0)
            costs.pio_us.push_back(
                std::chrono::duration<double, std::micro>(now - phase_start).count() / n);
          phase_start = now;
          bare_msr_phase = true;
        } else if (port == kPortRoundStart) {
          const Clock::time_point now = Clock::now();
          if (in_round) {
            if (done >= 0)
              costs.bare_msr_us.push_back(
                  std::chrono::duration<double, std::micro>(now - phase_start).count() / n);
            ++done;
          }
          in_round = true;
          bare_msr_phase = false;
          phase_start = now;
        } else {
          throw std::runtime_error("unexpected OUT to port " + std::to_string(port));
        }
        break;
      }
      default:
        throw std::runtime_error("unexpected KVM exit reason " + std::to_string(run->exit_reason));
    }
  }
  if (interrupts.raised) throw std::runtime_error("LLWPCB 0 raised an interrupt");

  // The handler's parts, outside KVM_RUN (the vCPU is stopped at an exit).
  const int reps = static_cast<int>(std::min<uint32_t>(n, 2000));
  Clock::time_point t0 = Clock::now();
  uint64_t cr3 = 0;
  for (int i = 0; i < reps; ++i) cr3 += vcpu.exit_sregs().cr3;
  costs.sregs_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / reps;
  const uint64_t real_cr3 = cr3 / reps;
  constexpr int kModelReps = 200000;
  t0 = Clock::now();
  for (int i = 0; i < kModelReps; ++i)
    if (control.write_msr(kMsrLwpcb, 0, 0, real_cr3).general_protection)
      throw std::runtime_error("write_msr #GP");
  costs.write_msr_us =
      std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / kModelReps;
  return costs;
}

struct Options {
  std::string pmuvm = "bazel-bin/vmm/pmuvm";
  std::string hello = "bazel-bin/guest/programs/hello";
  int runs = 5;
  uint32_t exits = 2000;
  int rounds = 15;
  double timeout_s = 300;
};

void usage() {
  std::printf(
      "usage: kvm_bench [--pmuvm PATH] [--hello PATH] [--runs N] [--exits N] [--rounds N]\n"
      "                 [--timeout SECONDS]\n"
      "       kvm_bench --minimal-vm\n"
      "Measures pmuvm against minimal KVM work on this host's /dev/kvm (run it through\n"
      "tools/kvm-host/run where there is none). Defaults: --pmuvm bazel-bin/vmm/pmuvm\n"
      "--hello bazel-bin/guest/programs/hello (relative to the working directory), --runs 5\n"
      "(process runs per kind, interleaved, after one warm-up each), --exits 2000 (exits per\n"
      "phase), --rounds 15 (rounds of both phases after one warm-up), --timeout 300 (per "
      "process).\n");
}

}  // namespace

int main(int argc, char** argv) try {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kvm_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--minimal-vm") return minimal_vm();
    if (a == "--pmuvm")
      opt.pmuvm = value();
    else if (a == "--hello")
      opt.hello = value();
    else if (a == "--runs")
      opt.runs = std::max(1, std::stoi(value()));
    else if (a == "--exits")
      opt.exits = static_cast<uint32_t>(std::max(100, std::stoi(value())));
    else if (a == "--rounds")
      opt.rounds = std::max(1, std::stoi(value()));
    else if (a == "--timeout")
      opt.timeout_s = std::stod(value());
    else if (a == "--help" || a == "-h")
      return usage(), 0;
    else {
      std::fprintf(stderr, "kvm_bench: unknown argument %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  {
    const int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      std::fprintf(stderr,
                   "kvm_bench: cannot open /dev/kvm: %s — nothing measured; run it through "
                   "tools/kvm-host/run -- %s\n",
                   std::strerror(errno), argv[0]);
      return 1;
    }
    std::printf("pmuvm kvm_bench — KVM API %d\n", ioctl(fd, KVM_GET_API_VERSION, 0));
    close(fd);
  }
  std::printf("%s\n", host_line().c_str());
  bool complete = true;

  // (a) + (c): interleaved process runs. Before (b), so this process is still small when it
  // spawns (Linux carries the spawner's RSS into the child's ru_maxrss as a floor).
  std::string copy_note;
  const std::string self = in_memory_copy("/proc/self/exe", copy_note);
  const std::string pmuvm = in_memory_copy(opt.pmuvm, copy_note);
  std::vector<Series> series = {
      {"minimal KVM process (--minimal-vm)", {self, "--minimal-vm"}, {}, {}, {}},
      {"pmuvm run -- hello", {pmuvm, "run", "--", opt.hello}, {}, {}, {}},
      {"pmuvm run --mem 1024 -- hello",
       {pmuvm, "run", "--mem", "1024", "--", opt.hello},
       {},
       {},
       {}},
      {"pmuvm profiles (no VM: start-up share)", {pmuvm, "profiles"}, {}, {}, {}},
      {"pmuvm run --stats -- hello (breakdown)",
       {pmuvm, "run", "--stats", "--", opt.hello},
       {},
       {},
       {}},
      {"pmuvm run -- hello, exec'ed from " + opt.pmuvm,
       {opt.pmuvm, "run", "--", opt.hello},
       {},
       {},
       {}},
  };
  for (const std::string& path : {opt.pmuvm, opt.hello})
    if (access(path.c_str(), R_OK) != 0)
      std::printf(
          "note: %s: %s (build it: bazel build -c opt //vmm:pmuvm //guest/programs:hello)\n",
          path.c_str(), std::strerror(errno));
  for (const std::string& exe : {self, pmuvm}) hold_shared_libraries(exe, copy_note);
  const long spawner_rss_kib = self_rss_kib();
  // The interleaved rounds hold the series run from copies in memory, each round in a new order
  // (a fixed-seed shuffle); pmuvm exec'ed from its file runs after them, on its own. Measured in
  // the nested host: a run exec'ed from a 9p file leaves a debt that the next process touching
  // fresh memory pays (`pmuvm run --stats -- hello` right after it: 37 ms instead of 6 for
  // mapping RAM and copying the images in; after the minimal VM, `true`, `pmuvm profiles` or
  // another pmuvm run: 6), and with a fixed order, in which the minimal VM (4 KiB of RAM) came
  // right after that run, the series after the minimal one paid it (155-160 ms against 124-130
  // ms for the same command in another slot, whichever series held it).
  std::mt19937 shuffle_rng(20261127);
  std::vector<size_t> order(series.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  const size_t from_file = series.size() - 1;
  for (int i = 0; i <= 2 * opt.runs + 1;
       ++i) {  // i == 0, opt.runs + 1: warm-up (page cache, 9p, loader)
    const bool interleaved = i <= opt.runs;
    if (interleaved) std::shuffle(order.begin(), order.end(), shuffle_rng);
    for (size_t k : interleaved ? order : std::vector<size_t>{from_file}) {
      if (interleaved && k == from_file) continue;
      Series& s = series[k];
      if (s.failure) continue;
      ChildRun r = run_child(s.argv, opt.timeout_s);
      if (!r.ok) {
        s.failure = std::move(r);
        continue;
      }
      if (i == 0 || i == opt.runs + 1) continue;
      s.seconds.push_back(r.seconds);
      s.maxrss_kib.push_back(r.maxrss_kib);
      if (&s == &series[4]) s.runs.push_back(std::move(r));
    }
  }
  auto report_failure = [&](const Series& s) {
    std::printf("  %-44s FAILED: %s\n", s.label.c_str(), s.failure->what.c_str());
    if (!s.failure->err.empty())
      std::printf("      stderr (last lines):\n%s", tail(s.failure->err).c_str());
    if (!s.failure->out.empty())
      std::printf("      stdout (last lines):\n%s", tail(s.failure->out).c_str());
    complete = false;
  };

  std::printf(
      "\n(a) process wall time, spawn to reap; median of %d interleaved runs each, order "
      "shuffled per round, the run from its file after them (after one warm-up run "
      "each)\n",
      opt.runs);
  for (const Series* s : {&series[0], &series[1]}) {
    if (s->failure) {
      report_failure(*s);
      continue;
    }
    std::printf("  %-44s %9.2f ms   runs: %s ms\n", s->label.c_str(), median(s->seconds) * 1e3,
                join_ms(s->seconds).c_str());
  }
  if (!series[0].failure && !series[1].failure) {
    const double ratio = median(series[1].seconds) / median(series[0].seconds);
    std::printf("  %-44s %9.2fx  goal <= 2x: %s\n", "ratio pmuvm / minimal", ratio,
                verdict(ratio <= 2));
  }
  std::printf("  for scale, not in the ratio:\n");
  for (const Series* s : {&series[2], &series[3], &series[5]}) {
    if (s->failure) {
      report_failure(*s);
      continue;
    }
    std::printf("  %-44s %9.2f ms   runs: %s ms\n", s->label.c_str(), median(s->seconds) * 1e3,
                join_ms(s->seconds).c_str());
  }
  std::printf(
      "  (minimal: open /dev/kvm, KVM_CREATE_VM, one 4 KiB slot, one vCPU, real-mode hlt "
      "-> KVM_EXIT_HLT; this binary re-exec'd, raw ioctls)\n");
  std::printf("  %s\n",
              copy_note.empty()
                  ? "(both run from copies in memory (memfd), as from a host's page cache: "
                    "the nested KVM host's 9p root re-reads a binary's pages at every exec; "
                    "the last line above is pmuvm exec'ed from its file)"
                  : copy_note.c_str());
  if (const Series& b = series[4]; b.failure) {
    report_failure(b);
  } else {
    std::vector<std::vector<double>> per_phase(std::size(kPhaseNames));
    for (const ChildRun& r : b.runs)
      if (std::vector<double> phases = phases_of(r); !phases.empty())
        for (size_t i = 0; i < phases.size(); ++i) per_phase[i].push_back(phases[i]);
    if (per_phase[0].size() != b.runs.size()) {
      std::printf("  breakdown FAILED: a run printed no complete timeline line\n");
      complete = false;
    } else {
      std::printf(
          "  where `%s` spends it (its --stats timeline between spawn and reap; median "
          "of each phase over the same %zu runs, whole run %.2f ms):\n",
          "pmuvm run --stats -- hello", b.runs.size(), median(b.seconds) * 1e3);
      for (size_t i = 0; i < per_phase.size(); ++i)
        std::printf("    %-58s %8.2f ms   runs: %s ms\n", kPhaseNames[i],
                    median(per_phase[i]) * 1e3, join_ms(per_phase[i]).c_str());
    }
  }

  // (b)
  std::printf(
      "\n(b) per-exit round trip on pmuvm's KVM layer (GuestRam, KvmSystem/KvmVm/KvmVcpu, "
      "setup_long_mode, MSR filter {0xC0000105, 2}),\n"
      "    64-bit guest code at CPL 0, IF=0; median of %d rounds (after one warm-up), each "
      "round %u exits of each kind\n"
      "    back to back in the order listed; each phase also includes one marker PIO exit "
      "(+1/%u)\n",
      opt.rounds, opt.exits, opt.exits);
  try {
    const ExitCosts c = measure_exits(opt.exits, opt.rounds);
    const double msr = median(c.msr_us), pio = median(c.pio_us), bare = median(c.bare_msr_us);
    std::printf("  %-58s %9.2f µs\n", "WRMSR LWPMSR1 (0xC0000106) = 0, pmuvm's handler", msr);
    std::printf(
        "      (LLWPCB 0 = disable: valid at CPL 0 without a user-mapped LWPCB; each exit\n"
        "       handled as vmm/machine/vcpu_exits.cc write_msr does: CPL and CR3 from the synced "
        "registers,\n"
        "       then VcpuPmu::write_msr; every one returned handled, no #GP)\n");
    std::printf("  %-58s %9.2f µs\n", "OUT dx, al: bare PIO exit, trivial handler", pio);
    std::vector<double> paired;  // per round: both phases ran back to back, so drift cancels
    for (size_t i = 0; i < c.msr_us.size() && i < c.pio_us.size(); ++i)
      paired.push_back(c.msr_us[i] / c.pio_us[i]);
    std::printf("  %-58s %9.2fx  goal <= 1.3x: %s  (median of per-round ratios %.2fx)\n",
                "ratio pmuvm WRMSR / bare PIO", msr / pio, verdict(msr / pio <= 1.3),
                median(paired));
    std::printf("  breakdown:\n");
    std::printf("  %-58s %9.2f µs  (%.2fx PIO: KVM's own WRMSR exit path)\n",
                "same WRMSR, trivial handler (no pmuvm code)", bare, bare / pio);
    if (cpu_flag("svm") && !cpu_flag("nrip_save"))
      std::printf(
          "      (this AMD CPU has no nrip_save: KVM must decode each WRMSR to skip it, while\n"
          "       an OUT exit reports the next RIP itself; hardware with NRIPS does not pay "
          "that)\n");
    std::printf("  %-58s %9.2f µs  (%.2fx: pmuvm's share)\n", "pmuvm WRMSR - trivial WRMSR",
                msr - bare, msr / bare);
    std::printf("  %-58s %9.2f µs = synced sregs %.2f + write_msr %.3f\n",
                "pmuvm's handler alone, timed outside KVM_RUN", c.sregs_us + c.write_msr_us,
                c.sregs_us, c.write_msr_us);
    auto list = [](const std::vector<double>& v) {
      std::string s;
      char b[24];
      for (double x : v) std::snprintf(b, sizeof b, " %.1f", x), s += b;
      return s;
    };
    std::printf("  rounds (µs/exit): pmuvm WRMSR%s | PIO%s | trivial WRMSR%s\n",
                list(c.msr_us).c_str(), list(c.pio_us).c_str(), list(c.bare_msr_us).c_str());
    std::printf(
        "  exits handled: %llu pmuvm WRMSR, %llu PIO, %llu trivial WRMSR (warm-up included)\n",
        static_cast<unsigned long long>(c.msr_exits), static_cast<unsigned long long>(c.pio_exits),
        static_cast<unsigned long long>(c.bare_msr_exits));
  } catch (const std::exception& e) {
    std::printf("  FAILED: %s\n", e.what());
    complete = false;
  }

  // (c)
  std::printf(
      "\n(c) peak RSS (includes the guest pages it touched): ru_maxrss from wait4, max of "
      "the %d runs of (a)\n",
      opt.runs);
  auto max_mib = [](const std::vector<long>& kib) {
    return kib.empty() ? 0.0 : *std::max_element(kib.begin(), kib.end()) / 1024.0;
  };
  const Series& minimal = series[0];
  for (const Series* s : {&series[1], &series[2]}) {
    if (s->failure) {
      report_failure(*s);
      continue;
    }
    const double mib = max_mib(s->maxrss_kib);
    const double guest = s == &series[1] ? vmm::RunCommand{}.mem_mib : 1024;  // pmuvm's default
    std::printf(
        "  %-44s %9.1f MiB  (guest RAM %.0f MiB; goal <= %.0f + 32 MiB: %s; "
        "<= 32 MiB counting touched guest pages too: %s)\n",
        s->label.c_str(), mib, guest, guest, verdict(mib <= guest + 32), verdict(mib <= 32));
  }
  if (!minimal.failure)
    std::printf("  %-44s %9.1f MiB  (reference)\n", minimal.label.c_str(),
                max_mib(minimal.maxrss_kib));
  std::printf(
      "  Nothing is subtracted. Guest RAM is an anonymous mapping, resident only where touched,\n"
      "  and those pages are in the figure; their number is not visible from outside and is\n"
      "  not subtracted. ru_maxrss is also at least this spawner's RSS at spawn (%.1f MiB;\n"
      "  Linux carries it across fork/exec); a figure near that is the floor, not pmuvm.\n",
      spawner_rss_kib / 1024.0);
  if (!complete) {
    std::printf("\nkvm_bench: incomplete — see FAILED lines above\n");
    return 1;
  }
  return 0;
} catch (const std::invalid_argument&) {
  std::fprintf(stderr,
               "kvm_bench: a numeric option has a value that is not a number (see --help)\n");
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "kvm_bench: %s\n", e.what());
  return 1;
}
