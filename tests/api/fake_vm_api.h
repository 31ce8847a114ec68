// A VmApi that records every call and answers what the test tells it to, so the API server's
// checks and dispatch are tested without a VM.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "vmm/api/vm_api.h"

namespace vmm::api {

class FakeVmApi : public VmApi {
 public:
  // The answer to a call named like the route ("vm.pause"); `argument` is the destination_url,
  // or "". Default: 200 with {"call": name} (+ "destination_url"), ping {"version": "fake"}.
  std::function<ApiResponse(const std::string& name, const std::string& argument)> respond =
      [](const std::string& name, const std::string& argument) {
        if (name == "vmm.ping") return ApiResponse{200, {{"version", "fake"}}};
        ApiResponse r{200, {{"call", name}}};
        if (!argument.empty()) r.body["destination_url"] = argument;
        return r;
      };
  // How long each call takes (to see that calls never overlap).
  std::chrono::milliseconds delay{0};

  // "vm.pause", "vm.snapshot file:///d", ... in call order.
  std::vector<std::string> calls() const {
    std::lock_guard lock(mutex_);
    return calls_;
  }
  int most_concurrent_calls() const {
    std::lock_guard lock(mutex_);
    return most_concurrent_;
  }

  ApiResponse ping() override { return call("vmm.ping"); }
  ApiResponse info() override { return call("vm.info"); }
  ApiResponse pause() override { return call("vm.pause"); }
  ApiResponse resume() override { return call("vm.resume"); }
  ApiResponse snapshot(const std::string& url) override { return call("vm.snapshot", url); }
  ApiResponse send_migration(const std::string& url, std::optional<int> deadline_ms) override {
    return call("vm.send-migration",
                deadline_ms ? url + " deadline_ms=" + std::to_string(*deadline_ms) : url);
  }
  ApiResponse shutdown() override { return call("vm.shutdown"); }
  ApiResponse pmu() override { return call("vm.pmu"); }

 private:
  ApiResponse call(const std::string& name, const std::string& argument = "") {
    {
      std::lock_guard lock(mutex_);
      calls_.push_back(argument.empty() ? name : name + " " + argument);
      most_concurrent_ = std::max(most_concurrent_, ++concurrent_);
    }
    std::this_thread::sleep_for(delay);
    struct Leave {
      FakeVmApi* self;
      ~Leave() {
        std::lock_guard lock(self->mutex_);
        --self->concurrent_;
      }
    } leave{this};
    return respond(name, argument);  // may throw: the server must survive it
  }

  mutable std::mutex mutex_;
  std::vector<std::string> calls_;
  int concurrent_ = 0;
  int most_concurrent_ = 0;
};

}  // namespace vmm::api
