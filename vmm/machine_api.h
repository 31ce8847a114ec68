// The API socket's calls (DESIGN §4.10) on a running Machine: vm.pause/resume with the user's
// pause kept apart from the short pauses of snapshots and migrations, vm.snapshot into a
// snapshot directory, vm.send-migration with the pre-copy figures in the answer, vm.info,
// vm.pmu, vm.shutdown. The HTTP side (vmm/api) has already checked every request.
#pragma once

#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "vmm/api/vm_api.h"
#include "vmm/machine_control.h"

namespace vmm {

class MachineApi : public api::VmApi {
 public:
  // `paused`: the machine starts paused (run --paused) and vm.resume starts it.
  explicit MachineApi(MachineControl& machine, bool paused = false)
      : machine_(machine), paused_by_user_(paused) {}

  api::ApiResponse ping() override;
  api::ApiResponse info() override;
  api::ApiResponse pause() override;
  api::ApiResponse resume() override;
  api::ApiResponse snapshot(const std::string& destination_url) override;
  api::ApiResponse send_migration(const std::string& destination_url) override;
  api::ApiResponse shutdown() override;
  api::ApiResponse pmu() override;

 private:
  // Parks the machine's vCPUs (nested in a user's pause); false, with nothing left paused, when
  // the run ended meanwhile.
  bool pause_machine();
  // Runs `work` (its error, or nullopt) inside a pause_machine() pause and resumes after it,
  // whatever happens; an exception becomes the error.
  std::optional<std::string> while_paused(const std::function<std::optional<std::string>()>& work);
  // A pause the machine took itself at a progress point (run --pause-on-output, ...) becomes
  // the user's: vm.info says paused, vm.resume ends it. Called first by every call.
  void adopt_progress_pause();

  MachineControl& machine_;
  bool paused_by_user_ = false;  // calls come one at a time (vm_api.h): no lock needed
  bool gone_ = false;            // handed over or shut down: nothing more to do here
};

}  // namespace vmm
