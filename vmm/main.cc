// pmuvm: parse the command line, check every input, then boot. Exit status: the guest's, 2 for
// a usage error, 3 for a VMM/KVM failure (DESIGN §4.6). Errors are one line on stderr.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <iterator>

#include "vmm/bundled_kernel.h"
#include "vmm/command_line.h"
#include "vmm/cpu/cpu_profile.h"
#include "vmm/host/perf_counter.h"
#include "vmm/loader/elf_image.h"
#include "vmm/machine.h"
#include "vmm/profiles_command.h"
#include "vmm/vmm_error.h"

namespace {

vmm::ElfImage load_elf_or_usage_error(const std::string& path) {
  auto r = vmm::load_elf_file(path);
  if (auto* error = std::get_if<std::string>(&r)) throw vmm::UsageError(*error);
  return std::move(std::get<vmm::ElfImage>(r));
}

// The whole file, or a usage error naming it. Kernels and initrds are read whole (they are copied
// into guest RAM whole); the size is checked against the RAM later, with the layout.
std::vector<uint8_t> read_file_or_usage_error(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw vmm::UsageError(std::string("cannot read ") + what + " " + path + ": " +
                                 std::strerror(errno));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw vmm::UsageError(std::string("cannot read ") + what + " " + path);
  return bytes;
}

// --kernel is a Linux bzImage (DESIGN §4.9) or an ELF kernel; --initrd/--cmdline and the
// programs must fit the kind.
void choose_kernel(const vmm::RunCommand& cmd, vmm::MachineOptions& options) {
  std::vector<uint8_t> file = read_file_or_usage_error(cmd.kernel, "kernel");
  options.kernel_name = cmd.kernel;
  if (!vmm::has_linux_boot_header(file)) {
    if (!cmd.initrd.empty() || cmd.cmdline_given)
      throw vmm::UsageError(cmd.kernel + " is not a Linux bzImage; --initrd and --cmdline are for "
                            "Linux guests");
    if (cmd.programs.empty())
      throw vmm::UsageError("run needs at least one program after `--` (see pmuvm run --help)");
    options.kernel = load_elf_or_usage_error(cmd.kernel);
    return;
  }
  auto image = vmm::parse_bzimage(file, cmd.kernel);
  if (auto* error = std::get_if<std::string>(&image)) throw vmm::UsageError(*error);
  if (!cmd.programs.empty())
    throw vmm::UsageError(cmd.kernel + " is a Linux kernel: it runs what its initramfs holds, not "
                          "programs after `--` (put them into --initrd)");
  vmm::MachineOptions::LinuxGuest linux_guest;
  linux_guest.bzimage = std::move(file);
  linux_guest.image = std::get<vmm::BzImage>(image);
  if (!cmd.initrd.empty()) linux_guest.initrd = read_file_or_usage_error(cmd.initrd, "initrd");
  linux_guest.initrd_name = cmd.initrd;
  linux_guest.cmdline = cmd.cmdline;
  options.linux_guest = std::move(linux_guest);
}


int run(const vmm::RunCommand& cmd) {
  spdlog::set_default_logger(spdlog::stderr_color_mt("pmuvm"));
  spdlog::set_level(spdlog::level::from_str(cmd.log_level));
  spdlog::set_pattern("pmuvm: [%l] %v");

  vmm::ProfileResult profile = vmm::resolve_cpu_option(cmd.cpu);
  if (!profile.ok()) throw vmm::UsageError(profile.error);
  vmm::MachineOptions options;
  options.profile = std::move(*profile.profile);
  options.vcpus = cmd.vcpus;
  options.mem_mib = cmd.mem_mib;
  options.seed = cmd.seed;
  options.timer_hz = cmd.timer_hz;
  options.max_interrupts_per_second = cmd.max_interrupt_rate;
  options.lwp_report = cmd.lwp_report;
  options.lwp_trace = cmd.lwp_trace;
  options.kvm_device = cmd.kvm_device;
  if (cmd.kernel.empty()) {
    auto r = vmm::parse_elf(vmm::bundled_kernel(), "bundled kernel");
    if (auto* error = std::get_if<std::string>(&r)) throw vmm::VmmError(*error);
    options.kernel = std::move(std::get<vmm::ElfImage>(r));
  } else {
    choose_kernel(cmd, options);
  }
  for (const vmm::ProgramArgs& p : cmd.programs)
    options.programs.push_back(vmm::GuestProgram{p.path, load_elf_or_usage_error(p.path), p.args});
  // Counting backend: the precise backend is the one implemented; passing host counters through exists as plumbing (vmm/host) but is not wired
  // into the run loop yet, so `auto` uses precise everywhere and `host` is refused.
  std::string reason;
  auto backend = vmm::choose_backend(cmd.backend, vmm::probe_host_pmu(), &reason);
  if (auto* error = std::get_if<1>(&backend)) throw vmm::UsageError(*error);
  if (std::get<0>(backend) == "host") {
    if (cmd.backend == "host")
      throw vmm::UsageError("--backend host: passing host counters through is not implemented yet");
    reason += "; the host backend is not implemented yet";
  }
  // Both steppers count identically (tests/e2e). auto = kvm: on SVM and VMX hosts KVM's
  // single-step stops at every CPL and needs nothing from the guest kernel.
  options.stepper = cmd.stepper == "guest" ? vmm::MachineOptions::Stepper::kGuest
                                           : vmm::MachineOptions::Stepper::kKvm;
  if (options.linux_guest && cmd.stepper == "guest")
    throw vmm::UsageError("--stepper guest needs the bundled kernel's help; a Linux guest is "
                          "counted with --stepper kvm (the default)");
  spdlog::info("counting backend: precise, {} stepper ({})",
               cmd.stepper == "guest" ? "guest-assisted" : "KVM single-step", reason);

  vmm::Machine machine(std::move(options));  // UsageError for a guest that cannot fit
  return machine.run();
}

}  // namespace

int main(int argc, char** argv) {
  const vmm::ParsedCommandLine cl = vmm::parse_command_line(std::vector<std::string>(argv, argv + argc));
  try {
    switch (cl.kind) {
      case vmm::ParsedCommandLine::Kind::kExit:
        (cl.exit_status == 0 ? std::cout : std::cerr) << cl.message << (cl.exit_status ? "\n" : "");
        return cl.exit_status;
      case vmm::ParsedCommandLine::Kind::kProfiles:
        return vmm::run_profiles_command(cl.profiles, std::cout, std::cerr);
      case vmm::ParsedCommandLine::Kind::kRun:
        return run(cl.run);
    }
  } catch (const vmm::UsageError& e) {
    std::cerr << "pmuvm: " << e.what() << '\n';
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "pmuvm: " << e.what() << '\n';
    return 3;
  }
  return 3;
}
