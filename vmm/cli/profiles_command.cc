#include "vmm/cli/profiles_command.h"

#include <string>
#include <vector>

#include "vmm/cpu/cpu_profile.h"
#include "vmm/cpu/describe_profile.h"
#include "vmm/cpu/libvirt_baseline.h"
#include "vmm/cpu/migration_check.h"
#include "vmm/cpu/profile_baseline.h"
#include "vmm/cpu/profile_writer.h"
#include "vmm/printable.h"

namespace vmm {
namespace {

constexpr int kUsageError = 2;
constexpr int kVmmFailure = 3;

// Messages quote profile files (names, keys): escaped on the way out (vmm/printable.h).
int fail(std::ostream& err, int status, const std::string& message) {
  err << "pmuvm: " << printable(message, {.max_bytes = 64 << 10, .keep_newlines = true}) << '\n';
  return status;
}

int list(std::ostream& out) {
  for (const std::string& name : builtin_profile_names()) {
    Result<CpuProfile> r = builtin_profile(name);
    out << name << (r.ok() ? "  " + r->description : "  (invalid: " + r.error().message + ")")
        << '\n';
  }
  return 0;
}

int describe(const std::string& name, std::ostream& out, std::ostream& err) {
  Result<CpuProfile> r = resolve_cpu_option(name);
  if (!r.ok()) return fail(err, kUsageError, r.error().message);
  out << describe_profile(*r);
  return 0;
}

// The baseline goes to stdout only once libvirt agreed, so `> file` never keeps a baseline that
// failed its cross-check.
int baseline(const std::vector<std::string>& names, std::ostream& out, std::ostream& err) {
  std::vector<CpuProfile> members;
  for (const std::string& n : names) {
    Result<CpuProfile> r = resolve_cpu_option(n);
    if (!r.ok()) return fail(err, kUsageError, r.error().message);
    members.push_back(std::move(*r));
  }
  Result<CpuProfile> b = compute_baseline(members);
  if (!b.ok()) return fail(err, kVmmFailure, b.error().message);
  const LibvirtCrossCheck check = cross_check_with_libvirt(members, *b);
  if (!check.ok()) return fail(err, kVmmFailure, check.error);
  err << "libvirt virConnectBaselineCPU agrees: " << check.agreed << " x86 features";
  if (!check.unchecked.empty()) {
    err << " (not in libvirt's cpu_map, so not checked:";
    for (const std::string& f : check.unchecked) err << ' ' << f;
    err << ')';
  }
  err << '\n';
  out << to_profile_json(*b);
  return 0;
}

int check_migration(const std::string& from, const std::string& to, std::ostream& out,
                    std::ostream& err) {
  Result<CpuProfile> guest = resolve_cpu_option(from);
  if (!guest.ok()) return fail(err, kUsageError, guest.error().message);
  Result<CpuProfile> destination = resolve_cpu_option(to);
  if (!destination.ok()) return fail(err, kUsageError, destination.error().message);
  const std::vector<std::string> refusals = migration_refusals(*guest, *destination);
  out << describe_verdict(from, to, refusals);
  return refusals.empty() ? 0 : 1;
}

}  // namespace

int run_profiles_command(const ProfilesCommand& cmd, std::ostream& out, std::ostream& err) {
  switch (cmd.mode) {
    case ProfilesCommand::Mode::kList: return list(out);
    case ProfilesCommand::Mode::kDescribe: return describe(cmd.name, out, err);
    case ProfilesCommand::Mode::kBaseline: return baseline(cmd.baseline, out, err);
    case ProfilesCommand::Mode::kCheckMigration:
      return check_migration(cmd.check_migration.at(0), cmd.check_migration.at(1), out, err);
  }
  return fail(err, kVmmFailure, "unknown profiles mode");
}

}  // namespace vmm
