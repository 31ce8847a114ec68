#include "vmm/machine/guest_kind.h"

#include "guest/abi/pmuvm_abi.h"
#include "vmm/cpu/cpuid_table.h"

namespace vmm {
namespace {

class BundledKernelGuest : public GuestKind {
 public:
  explicit BundledKernelGuest(LoadedGuest loaded = {}) : loaded_(loaded) {}
  bool linux_guest() const override { return false; }
  const char* name() const override { return "bundled"; }
  LongModeState set_up_long_mode(GuestRam& ram) const override { return setup_long_mode(ram); }
  void set_boot_registers(KvmVcpu& vcpu, uint32_t index, const LongModeState& boot) const override {
    vcpu.enter_long_mode(boot, loaded_.kernel_entry, loaded_.boot_info, index);
    if (index > 0) vcpu.make_runnable();  // every vCPU enters the kernel at once
  }
  bool has_pit() const override { return false; }
  std::optional<std::string> panic_reason(std::string_view) const override { return {}; }
  bool triple_fault_is_reset() const override { return false; }
  bool tasks_by_address_space() const override { return false; }

 private:
  LoadedGuest loaded_;
};

// A Linux guest's panic() ends with this console line (kernel/panic.c).
constexpr std::string_view kLinuxPanicEnd = "---[ end Kernel panic - not syncing: ";

class LinuxGuest : public GuestKind {
 public:
  explicit LinuxGuest(LinuxBoot boot = {}) : boot_(boot) {}
  bool linux_guest() const override { return true; }
  const char* name() const override { return "linux"; }
  LongModeState set_up_long_mode(GuestRam& ram) const override {
    return setup_long_mode_for_linux(ram);
  }
  // Linux starts its application processors itself (INIT/SIPI through the in-kernel LAPIC);
  // until then they wait, as KVM leaves them.
  void set_boot_registers(KvmVcpu& vcpu, uint32_t index, const LongModeState& boot) const override {
    if (index == 0) vcpu.enter_long_mode(boot, boot_.entry, 0, boot_.zero_page);
  }
  bool has_pit() const override { return true; }
  std::optional<std::string> panic_reason(std::string_view line) const override {
    if (line.rfind(kLinuxPanicEnd, 0) != 0) return {};
    std::string_view reason = line.substr(kLinuxPanicEnd.size());
    if (const size_t end = reason.rfind(" ]---"); end != std::string_view::npos)
      reason = reason.substr(0, end);
    return "Linux guest kernel panic: " + std::string(reason);
  }
  // Linux's last reboot method (BOOT_TRIPLE), as on a PC: a reset.
  bool triple_fault_is_reset() const override { return true; }
  bool tasks_by_address_space() const override { return true; }

 private:
  LinuxBoot boot_;
};

}  // namespace

Result<std::unique_ptr<GuestKind>> load_guest_kind(const MachineOptions& options,
                                                   const GuestCpu& cpu, GuestRam& ram) {
  if (options.linux_guest) {
    const MachineOptions::LinuxGuest& g = *options.linux_guest;
    LinuxBootOptions boot{
        g.cmdline,     g.initrd, g.initrd_name, options.vcpus,
        cpu.signature, 0 /* feature flags: Linux reads only the APIC IDs and CPU flags */};
    auto loaded = load_linux(ram, g.bzimage, g.image, options.kernel_name, boot);
    if (auto* error = loaded.error_message()) return Error::usage(*error);
    return std::unique_ptr<GuestKind>(new LinuxGuest(loaded.value()));
  }
  auto loaded = load_guest(ram, options.kernel, options.kernel_name, options.programs,
                           BootParameters{options.vcpus, cpu.pv_features,
                                          options.timer_hz ? options.timer_hz : PMUVM_TIMER_OFF});
  if (auto* error = loaded.error_message()) return Error::usage(*error);
  return std::unique_ptr<GuestKind>(new BundledKernelGuest(loaded.value()));
}

std::unique_ptr<GuestKind> restored_guest_kind(bool linux_guest) {
  if (linux_guest) return std::make_unique<LinuxGuest>();
  return std::make_unique<BundledKernelGuest>();
}

}  // namespace vmm
