// The API socket's calls (DESIGN §4.10) on a running Machine: vm.pause/resume (the user's pause
// in the machine's VmLifecycle, apart from the short holds of snapshots and migrations),
// vm.snapshot into a snapshot directory, vm.send-migration with the pre-copy figures in the answer,
// vm.info, vm.pmu, vm.shutdown. The HTTP side (vmm/api) has already checked every request.
#pragma once

#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "vmm/api/vm_api.h"
#include "vmm/machine/machine_control.h"
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
  api::ApiResponse send_migration(const std::string& destination_url,
                                  std::optional<int> deadline_ms) override;
  api::ApiResponse shutdown() override;
  api::ApiResponse pmu() override;

  // A migration is under way (this side's send_migration, or the destination's wait for the
  // commit): every call but ping, info and shutdown answers 409, and info's state is
  // "migrating".
  void set_migrating(bool on);

 private:
  // Under calls_: the refusal a call gets while migrating, or nothing.
  std::optional<api::ApiResponse> refused_while_migrating() const;
  // Runs `work` inside a hold the caller took (MachineControl::pause) and releases it after,
  // whatever happens; an exception becomes the error.
  Status while_paused(const std::function<Status()>& work);

  MachineControl& machine_;  // its lifecycle keeps every state but the migration's
  // Held by the calls that touch the VM (not during send_migration's own run, which the server
  // lets beside the others, vm_api.h): none of them touches the VM a migration holds.
  std::mutex calls_;
  bool migrating_ = false;  // under calls_
};

}  // namespace vmm
