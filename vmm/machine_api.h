// The API socket's calls (DESIGN §4.10) on a running Machine: vm.pause/resume (the user's pause
// in the machine's VmLifecycle, apart from the short holds of snapshots and migrations),
// vm.snapshot into a snapshot directory, vm.send-migration with the pre-copy figures in the answer,
// vm.info, vm.pmu, vm.shutdown. The HTTP side (vmm/api) has already checked every request.
#pragma once

#include <functional>
#include <string>

#include "vmm/api/vm_api.h"
#include "vmm/machine_control.h"
#include "vmm/result.h"

namespace vmm {

class MachineApi : public api::VmApi {
 public:
  explicit MachineApi(MachineControl& machine) : machine_(machine) {}

  api::ApiResponse ping() override;
  api::ApiResponse info() override;
  api::ApiResponse pause() override;
  api::ApiResponse resume() override;
  api::ApiResponse snapshot(const std::string& destination_url) override;
  api::ApiResponse send_migration(const std::string& destination_url) override;
  api::ApiResponse shutdown() override;
  api::ApiResponse pmu() override;

 private:
  // Runs `work` inside a hold the caller took (MachineControl::pause) and releases it after,
  // whatever happens; an exception becomes the error.
  Status while_paused(const std::function<Status()>& work);

  MachineControl& machine_;  // its lifecycle keeps every state: calls hold none here
};

}  // namespace vmm
