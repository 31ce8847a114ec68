#include "vmm/machine/machine_api.h"

#include <spdlog/spdlog.h>

#include "vmm/migration/migration_channel.h"
#include "vmm/migration/migration_source.h"
#include "vmm/snapshot/snapshot_dir.h"
#include "vmm/version.h"

namespace vmm {

using api::ApiResponse;
using api::error_response;

ApiResponse MachineApi::ping() { return ApiResponse{200, {{"version", kPmuvmVersion}}}; }

void MachineApi::set_migrating(bool on) {
  std::lock_guard g(calls_);
  migrating_ = on;
}

std::optional<ApiResponse> MachineApi::refused_while_migrating() const {
  if (!migrating_) return std::nullopt;
  return error_response(409, "a migration is in progress");
}

ApiResponse MachineApi::info() {
  std::lock_guard g(calls_);
  nlohmann::json description = machine_.describe();
  if (migrating_) description["state"] = "migrating";
  return ApiResponse{200, std::move(description)};
}

Status MachineApi::while_paused(const std::function<Status()>& work) {
  // The hold pause_machine() took is given back however `work` ends: an exception (a snapshot
  // whose manifest cannot be written, say) becomes the request's error, not a VM paused for good.
  struct ResumeAtExit {
    MachineControl& machine;
    ~ResumeAtExit() { machine.resume(); }
  } resume_at_exit{machine_};
  try {
    return work();
  } catch (const std::exception& e) {
    return Error::vmm(e.what());
  }
}

ApiResponse MachineApi::pause() {
  std::lock_guard g(calls_);
  if (auto refused = refused_while_migrating()) return *refused;
  if (Status s = machine_.lifecycle().pause_by_user(); !s.ok())
    return error_response(409, s.error().message);
  return ApiResponse{200, {{"state", "paused"}}};
}

ApiResponse MachineApi::resume() {
  std::lock_guard g(calls_);
  if (auto refused = refused_while_migrating()) return *refused;
  if (Status s = machine_.lifecycle().resume_by_user(); !s.ok())
    return error_response(409, s.error().message);
  return ApiResponse{200, {{"state", "running"}}};
}

ApiResponse MachineApi::snapshot(const std::string& destination_url) {
  std::lock_guard g(calls_);
  if (auto refused = refused_while_migrating()) return *refused;
  if (machine_.lifecycle().ended()) return error_response(409, "the VM has ended");
  const std::optional<std::string> dir = file_url_path(destination_url);
  if (!dir) return error_response(400, "destination_url must be file:///DIR");
  // Nested inside a user's pause: the VM stays paused afterwards.
  if (!machine_.pause()) return error_response(409, "the VM has ended");
  const auto start = std::chrono::steady_clock::now();
  const Status written = while_paused([&] { return write_snapshot_dir(*dir, machine_); });
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!written.ok()) return error_response(500, "snapshot failed: " + written.error().message);
  spdlog::info("snapshot written to {} in {:.1f} ms", *dir, ms);
  return ApiResponse{
      200,
      {{"destination", *dir}, {"memory_bytes", machine_.guest_ram().size()}, {"milliseconds", ms}}};
}

ApiResponse MachineApi::send_migration(const std::string& destination_url,
                                       std::optional<int> deadline_ms) {
  const std::string path = unix_url_path(destination_url);
  if (path.empty()) return error_response(400, "destination_url must be unix:PATH");
  {
    std::lock_guard g(calls_);
    if (auto refused = refused_while_migrating()) return *refused;
    if (machine_.lifecycle().ended()) return error_response(409, "the VM has ended");
    migrating_ = true;
  }
  struct EndMigrating {
    MachineApi& api;
    ~EndMigrating() { api.set_migrating(false); }
  } end_migrating{*this};
  MigrationLimits limits;
  if (deadline_ms) limits.deadline_ms = *deadline_ms;
  // A stop signal or vm.shutdown ends the run: the migration gives up at once (DESIGN §4.12).
  limits.stop_check = [this]() -> std::optional<std::string> {
    if (machine_.lifecycle().ended()) return "the VM's run ended during the migration";
    return std::nullopt;
  };
  // A VM the user paused migrates too; its pre-copy rounds then find nothing dirty.
  const MigrationOutcome out = migrate_to(path, machine_, limits);
  nlohmann::json stats = {{"pages_per_round", out.stats.pages_per_round},
                          {"final_pages", out.stats.final_pages},
                          {"state_bytes", out.stats.state_bytes},
                          {"total_ms", out.stats.total_ms},
                          {"downtime_ms", out.stats.downtime_ms}};
  if (!out.handed_over) {
    spdlog::warn("migration to {} failed, the VM runs on here: {}", path, out.error);
    return ApiResponse{
        409, {{"error", "migration failed, the VM runs on here: " + out.error}, {"stats", stats}}};
  }
  spdlog::info("migrated to {}: {} pre-copy round(s), downtime {:.1f} ms, total {:.1f} ms", path,
               out.stats.pages_per_round.size(), out.stats.downtime_ms, out.stats.total_ms);
  machine_.handed_over();
  return ApiResponse{200, stats};
}

// Also during a migration: the migration then gives up at once (its stop check sees the end).
ApiResponse MachineApi::shutdown() {
  if (Status s = machine_.shut_down(); !s.ok()) return error_response(409, s.error().message);
  return ApiResponse{200, {{"state", "ended"}}};
}

ApiResponse MachineApi::pmu() {
  std::lock_guard g(calls_);
  if (auto refused = refused_while_migrating()) return *refused;
  if (!machine_.pause()) return error_response(409, "the VM has ended");
  nlohmann::json j;
  const Status read = while_paused([&]() -> Status {
    j = machine_.pmu_state();
    return {};
  });
  if (!read.ok()) return error_response(500, "vm.pmu failed: " + read.error().message);
  return ApiResponse{200, j};
}

}  // namespace vmm
