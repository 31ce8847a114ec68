// pmuvm: parse the command line, check every input, then boot. Exit status: the guest's, 2 for
// a usage error, 3 for a VMM/KVM failure (DESIGN §4.6). Errors are one line on stderr.
// `pmuvm ctl` calls a running pmuvm's API socket instead (vmm/cli/ctl.h: 0, 1, 2, 3).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>

#include "vmm/api/api_server.h"
#include "vmm/cli/ctl.h"
#include "vmm/boot/bundled_kernel.h"
#include "vmm/cli/command_line.h"
#include "vmm/cpu/cpu_profile.h"
#include "vmm/counting/counting_choice.h"
#include "vmm/boot/elf_image.h"
#include "vmm/boot/image_file.h"
#include "vmm/cpu/migration_check.h"
#include "vmm/machine/machine.h"
#include "vmm/machine_limits.h"
#include "vmm/migration/migration_destination.h"
#include "vmm/snapshot/snapshot_dir.h"
#include "vmm/printable.h"
#include "vmm/cli/profiles_command.h"
#include "vmm/startup_timeline.h"
#include "vmm/vmm_error.h"

namespace {

// Guest images go into the guest's RAM whole: none can be larger, and that is checked before
// a byte is read (vmm/boot/image_file.h); the exact fit is checked later, with the layout.
struct ImageLimit {
  uint64_t bytes;
  std::string why;
};
ImageLimit image_limit(uint64_t mem_mib) {
  return {mem_mib << 20, "the guest's " + std::to_string(mem_mib) + " MiB of RAM (--mem)"};
}

vmm::ElfImage load_elf_or_usage_error(const std::string& path, const ImageLimit& limit) {
  auto r = vmm::load_elf_file(path, limit.bytes, limit.why);
  if (auto* error = r.error_message()) throw vmm::UsageError(*error);
  return std::move(r.value());
}

// The whole file, or a usage error naming it.
std::vector<uint8_t> read_file_or_usage_error(const std::string& path, const char* what,
                                              const ImageLimit& limit) {
  auto r = vmm::read_image_file<uint8_t>(path, limit.bytes, limit.why);
  if (auto* error = r.error_message())
    throw vmm::UsageError(std::string("cannot read ") + what + " " + *error);
  return std::move(r.value());
}

// --kernel is a Linux bzImage (DESIGN §4.9) or an ELF kernel; --initrd/--cmdline and the
// programs must fit the kind.
void choose_kernel(const vmm::RunCommand& cmd, vmm::MachineOptions& options) {
  const ImageLimit limit = image_limit(cmd.mem_mib);
  std::vector<uint8_t> file = read_file_or_usage_error(cmd.kernel, "kernel", limit);
  options.kernel_name = cmd.kernel;
  if (!vmm::has_linux_boot_header(file)) {
    if (!cmd.initrd.empty() || cmd.cmdline_given)
      throw vmm::UsageError(cmd.kernel +
                            " is not a Linux bzImage; --initrd and --cmdline are for "
                            "Linux guests");
    if (cmd.programs.empty())
      throw vmm::UsageError("run needs at least one program after `--` (see pmuvm run --help)");
    options.kernel = load_elf_or_usage_error(cmd.kernel, limit);
    return;
  }
  auto image = vmm::parse_bzimage(file, cmd.kernel);
  if (auto* error = image.error_message()) throw vmm::UsageError(*error);
  if (!cmd.programs.empty())
    throw vmm::UsageError(cmd.kernel +
                          " is a Linux kernel: it runs what its initramfs holds, not "
                          "programs after `--` (put them into --initrd)");
  vmm::MachineOptions::LinuxGuest linux_guest;
  linux_guest.bzimage = std::move(file);
  linux_guest.image = image.value();
  if (!cmd.initrd.empty())
    linux_guest.initrd = read_file_or_usage_error(cmd.initrd, "initrd", limit);
  linux_guest.initrd_name = cmd.initrd;
  linux_guest.cmdline = cmd.cmdline;
  options.linux_guest = std::move(linux_guest);
}

void set_up_logging(const std::string& level) {
  spdlog::set_default_logger(spdlog::stderr_color_mt("pmuvm"));
  spdlog::set_level(spdlog::level::from_str(level));
  spdlog::set_pattern("pmuvm: [%l] %v");
}

// Why a VM described by `m` cannot run here (DESIGN §4.10): the profile the user named must be
// able to present what the guest saw, and this host's KVM must offer every CPUID bit of it.
// Empty: it can.
std::vector<std::string> refusals_for(const vmm::SnapshotManifest& m, const std::string& cpu,
                                      const std::string& kvm_device) {
  std::vector<std::string> reasons;
  if (!cpu.empty()) {
    reasons = vmm::migration_refusals(m.profile, vmm::resolve_cpu_option(cpu).value_or_throw());
  }
  for (std::string& r : vmm::host_cpuid_refusals(m, kvm_device)) reasons.push_back(std::move(r));
  return reasons;
}

// The host's physical memory in MiB: the default ceiling for the RAM an arriving VM asks for.
uint64_t host_memory_mib() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return vmm::limits::kMaxMemMib;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) >> 20;
}

std::string join_reasons(const std::vector<std::string>& reasons) {
  std::string text;
  for (const std::string& r : reasons) text += "\n  " + r;
  return text;
}

// A VM that resumes (a snapshot, a migration): the manifest's machine and CPU, this command's
// environment (its KVM device, API socket and outputs).
vmm::MachineOptions resumed_options(const vmm::SnapshotManifest& m,
                                    const vmm::RunEnvironment& environment) {
  vmm::MachineOptions options = vmm::options_from_manifest(m);
  static_cast<vmm::RunEnvironment&>(options) = environment;
  return options;
}

int restore(const vmm::RestoreCommand& cmd) {
  set_up_logging(cmd.log_level);
  const std::optional<std::string> dir = vmm::file_url_path(cmd.source);
  if (!dir) throw vmm::UsageError("--source needs file:///DIR, not " + cmd.source);
  auto read = vmm::read_snapshot_dir(*dir);
  if (auto* error = read.error_message()) throw vmm::UsageError("cannot restore: " + *error);
  vmm::SnapshotOnDisk& snapshot = read.value();
  if (auto reasons = refusals_for(snapshot.manifest, cmd.cpu, cmd.kvm_device); !reasons.empty())
    throw vmm::UsageError("the snapshot's VM cannot run here" +
                          (cmd.cpu.empty() ? std::string() : " as " + cmd.cpu) + ":" +
                          join_reasons(reasons));
  vmm::Machine machine = vmm::Machine::resume(
      resumed_options(snapshot.manifest, cmd), snapshot.manifest, [&](vmm::GuestRam& ram) {
        const auto start = std::chrono::steady_clock::now();
        vmm::load_snapshot_memory(snapshot, ram).prefixed("cannot restore: ").throw_if_error();
        spdlog::info(
            "read {} bytes of guest memory in {:.1f} ms (checksum checked)", ram.size(),
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count());
        return std::move(snapshot.state);
      });
  spdlog::info("restoring the snapshot in {} ({} vCPU(s), {} MiB, CPU profile {})", *dir,
               snapshot.manifest.vcpus, snapshot.manifest.mem_mib, snapshot.manifest.profile.name);
  return machine.run();
}

// `run --incoming unix:PATH`: everything before the VM runs is refused with status 2 and the
// source hears why (it keeps its VM); once it runs, its exit status is the guest's.
int incoming(const vmm::RunCommand& cmd) {
  std::optional<vmm::IncomingMigration> in;
  try {
    in.emplace(vmm::IncomingMigration::accept_at(vmm::unix_url_path(cmd.incoming)));
    const vmm::SnapshotManifest& m = in->manifest();
    std::vector<std::string> reasons =
        refusals_for(m, cmd.cpu_given ? cmd.cpu : "", cmd.kvm_device);
    // The peer chooses the machine's size; this side chooses what it lends (DESIGN §4.12).
    const uint64_t max_mem = cmd.max_mem_mib.value_or(host_memory_mib());
    if (m.mem_mib > max_mem)
      reasons.push_back("the VM asks for " + std::to_string(m.mem_mib) + " MiB of RAM; this " +
                        "destination lends at most " + std::to_string(max_mem) + " MiB (" +
                        (cmd.max_mem_mib ? "--max-mem" : "the host's memory; --max-mem") + ")");
    const uint64_t max_vcpus = cmd.max_vcpus.value_or(vmm::limits::kMaxVcpus);
    if (m.vcpus > max_vcpus)
      reasons.push_back("the VM asks for " + std::to_string(m.vcpus) + " vCPUs; this " +
                        "destination lends at most " + std::to_string(max_vcpus) +
                        " (--max-vcpus)");
    // An API socket that cannot be served would fail the VM after the commit, when the source
    // has let it go: refuse it while the source still has it.
    if (!cmd.api_socket.empty())
      if (const vmm::Status usable = vmm::api::ApiServer::unusable_path(cmd.api_socket);
          !usable.ok())
        reasons.push_back("--api-socket: " + usable.error().message);
    if (!reasons.empty()) {
      in->refuse(reasons);
      throw vmm::UsageError("refused the incoming VM" +
                            (cmd.cpu_given ? " (CPU profile " + cmd.cpu + ")" : std::string()) +
                            ":" + join_reasons(reasons));
    }
    in->accept();
    vmm::MachineOptions options = resumed_options(m, cmd);
    static_cast<vmm::PausePoints&>(options) = cmd;
    vmm::IncomingMigration* channel = &*in;
    vmm::Machine::Handover handover{
        .commit = [channel](const auto& stop_check) { channel->commit(stop_check); },
        .fail_before_commit = [channel](const std::string& why) { channel->fail(why); }};
    // The pages arrive into the built machine, then its state.
    vmm::Machine machine = vmm::Machine::resume(
        std::move(options), m, [&](vmm::GuestRam& ram) { return in->receive(ram); },
        std::move(handover));
    spdlog::info("migration received ({} vCPU(s), {} MiB, CPU profile {}); resuming", m.vcpus,
                 m.mem_mib, m.profile.name);
    return machine.run();
  } catch (const vmm::MigrationError& e) {
    throw vmm::UsageError(std::string("incoming migration failed before the VM ran: ") + e.what());
  } catch (const std::exception& e) {
    // KVM, the guest's RAM, a state that does not load: the source hears why, and keeps its VM.
    // (After the commit the channel is closed: fail() does nothing for a VM that ran.)
    if (in) in->fail(e.what());
    throw;
  }
}

int run(const vmm::RunCommand& cmd) {
  set_up_logging(cmd.log_level);
  if (!cmd.incoming.empty()) return incoming(cmd);

  vmm::MachineOptions options;
  options.profile = vmm::resolve_cpu_option(cmd.cpu).value_or_throw();
  static_cast<vmm::MachineShape&>(options) = cmd;
  static_cast<vmm::RunEnvironment&>(options) = cmd;
  static_cast<vmm::PausePoints&>(options) = cmd;
  options.debug_pause_every = cmd.debug_pause_every;
  if (cmd.kernel.empty()) {
    auto r = vmm::parse_elf(vmm::bundled_kernel(), "bundled kernel");
    if (auto* error = r.error_message()) throw vmm::VmmError(*error);
    options.kernel = std::move(r.value());
  } else {
    choose_kernel(cmd, options);
  }
  for (const vmm::ProgramArgs& p : cmd.programs)
    options.programs.push_back(vmm::GuestProgram{
        p.path, load_elf_or_usage_error(p.path, image_limit(cmd.mem_mib)), p.args});
  // How it counts (DESIGN §4.7, §4.11): the host PMU is asked only when the host backend may be.
  auto chosen = vmm::choose_counting({.backend = cmd.backend,
                                      .stepper = cmd.stepper,
                                      .host_counters = cmd.host_counters,
                                      .double_skid = cmd.double_skid,
                                      .skid_margin = cmd.skid_margin,
                                      .host_counters_given = cmd.host_counters_given,
                                      .double_skid_given = cmd.double_skid_given,
                                      .skid_margin_given = cmd.skid_margin_given,
                                      .linux_guest = options.linux_guest.has_value()},
                                     vmm::HostCapabilities::probe);
  if (auto* error = chosen.error_message()) throw vmm::UsageError(*error);
  options.counting = std::move(chosen.value());
  spdlog::info("{}", options.counting.describe());

  vmm::timeline::mark(vmm::timeline::Mark::kOptionsReady);
  int status;
  {
    // UsageError for a guest that cannot fit, before KVM is touched.
    vmm::Machine machine = vmm::Machine::boot(std::move(options));
    status = machine.run();
  }
  vmm::timeline::mark(vmm::timeline::Mark::kTornDown);
  if (cmd.stats) std::fprintf(stderr, "%s\n", vmm::timeline::line().c_str());
  return status;
}

// An error as the terminal may show it: errors quote what came from outside (a profile's keys, a
// manifest's fields, a peer's words), so every one is escaped on its way out (DESIGN §4.12);
// a refusal's reasons keep their lines.
std::string error_text(const std::exception& e) {
  return vmm::printable(e.what(), {.max_bytes = 64 << 10, .keep_newlines = true});
}

}  // namespace

int main(int argc, char** argv) {
  vmm::timeline::mark(vmm::timeline::Mark::kMain);
  const vmm::ParsedCommandLine cl =
      vmm::parse_command_line(std::vector<std::string>(argv, argv + argc));
  try {
    switch (cl.kind) {
      case vmm::ParsedCommandLine::Kind::kExit:
        (cl.exit_status == 0 ? std::cout : std::cerr) << cl.message << (cl.exit_status ? "\n" : "");
        return cl.exit_status;
      case vmm::ParsedCommandLine::Kind::kProfiles:
        return vmm::run_profiles_command(cl.profiles, std::cout, std::cerr);
      case vmm::ParsedCommandLine::Kind::kRun: return run(cl.run);
      case vmm::ParsedCommandLine::Kind::kRestore: return restore(cl.restore);
      case vmm::ParsedCommandLine::Kind::kCtl:
        return vmm::api::run_ctl(cl.ctl.api_socket, cl.ctl.verb, cl.ctl.body, std::cout, std::cerr);
    }
  } catch (const vmm::UsageError& e) {
    std::cerr << "pmuvm: " << error_text(e) << '\n';
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "pmuvm: " << error_text(e) << '\n';
    return 3;
  }
  return 3;
}
