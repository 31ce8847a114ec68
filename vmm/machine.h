// One guest: RAM, the KVM VM, one thread per vCPU, the devices, and each vCPU's control block.
// The constructor allocates RAM and loads the kernel and programs, throwing UsageError (status 2)
// for input that cannot work — before KVM is touched. run() opens KVM, boots, and returns the
// guest's exit status (DESIGN §4.6), or throws VmmError (status 3) for a VMM/KVM failure or a
// guest crash (triple fault, internal error) with the vCPU registers in the message. A Linux guest
// ends the run by a reset (i8042 0xFE or a triple fault: `reboot -f`, status 0) or through the
// exit port; a Linux panic (its console's "end Kernel panic" line) is status 3 with that line.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "vmm/boot/guest_loader.h"
#include "vmm/boot/linux_boot.h"
#include "vmm/cpu/cpu_profile.h"

namespace vmm {

struct MachineOptions {
  CpuProfile profile;
  uint32_t vcpus = 1;
  uint64_t mem_mib = 256;
  uint64_t seed = 0;
  uint32_t timer_hz = 100;  // the bundled kernel's tick; 0 = none (not used by Linux)
  ElfImage kernel;  // the bundled kernel (or an ELF one), unless linux_guest is set
  // A Linux guest (DESIGN §4.9) instead: the whole bzImage, its checked setup header, the initrd
  // and the command line. No programs then; Linux runs what its initramfs holds.
  struct LinuxGuest {
    std::vector<uint8_t> bzimage;
    BzImage image;
    std::vector<uint8_t> initrd;
    std::string initrd_name;
    std::string cmdline;
  };
  std::optional<LinuxGuest> linux_guest;
  std::string kernel_name = "bundled kernel";
  std::vector<GuestProgram> programs;
  uint32_t max_interrupts_per_second = 10000;  // storm protection (pmu/rate_limited_interrupt_sink.h)
  // The precise backend's stepper (DESIGN §4.7): KVM single-step (every CPL), or the bundled
  // kernel single-steps its profiled tasks and reports each step. kNone: no counting backend
  // (LWP state only, no records).
  enum class Stepper { kNone, kKvm, kGuest };
  Stepper stepper = Stepper::kKvm;
  std::string lwp_report;  // "" = none, "-" = stdout, else a file
  std::string lwp_trace;   // "" = none, else a JSON-lines file
  std::string kvm_device = "/dev/kvm";
};

class Machine {
 public:
  explicit Machine(MachineOptions options);
  ~Machine();
  int run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vmm
