#include "vmm/kvm/kvm_self_check.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "vmm/kvm/kvm_abi.h"
#include "vmm/vmm_error.h"

namespace vmm {
namespace {

// A file descriptor closed on every way out.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

std::string hex(uint64_t v) {
  char s[24];
  std::snprintf(s, sizeof s, "%#llx", static_cast<unsigned long long>(v));
  return s;
}

std::string exit_name(uint32_t reason) {
  switch (reason) {
    case KVM_EXIT_HLT: return "it ran to HLT";
    case KVM_EXIT_DEBUG: return "a debug exit";
    case KVM_EXIT_SHUTDOWN: return "it shut down";
    case KVM_EXIT_FAIL_ENTRY: return "KVM could not enter it";
    case KVM_EXIT_INTERNAL_ERROR: return "KVM internal error";
    default: return "KVM exit " + std::to_string(reason);
  }
}

}  // namespace

std::optional<std::string> missing_hardware_virtualization(std::string_view cpuinfo, bool pvm) {
  const std::string text(cpuinfo);
  if (std::regex_search(text, std::regex("^flags\\s*:.*\\b(svm|vmx)\\b", std::regex::multiline)))
    return std::nullopt;
  return std::string("no hardware virtualization (no svm or vmx in /proc/cpuinfo") +
         (pvm ? "; its KVM is PVM, kvm_pvm, where KVM's instruction breakpoints never fire)" : ")");
}

std::optional<std::string> guest_debug_self_test(const std::string& device) {
  Fd kvm{open(device.c_str(), O_RDWR | O_CLOEXEC)};
  if (kvm.fd < 0) return "cannot open " + device + ": " + std::strerror(errno);
  Fd vm{ioctl(kvm.fd, KVM_CREATE_VM, 0)};
  if (vm.fd < 0) return std::string("cannot create a VM: ") + std::strerror(errno);
  // One page of guest memory at 0x1000: nop; nop; hlt.
  constexpr uint64_t kCode = 0x1000;
  void* page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return std::string("no memory for the self-test");
  struct Unmap {
    void* p;
    ~Unmap() { munmap(p, 4096); }
  } unmap{page};
  const unsigned char code[] = {0x90, 0x90, 0xf4};
  std::memcpy(page, code, sizeof code);
  kvm_userspace_memory_region region{};
  region.guest_phys_addr = kCode;
  region.memory_size = 4096;
  region.userspace_addr = reinterpret_cast<uint64_t>(page);
  if (ioctl(vm.fd, KVM_SET_USER_MEMORY_REGION, &region) < 0)
    return std::string("cannot give a VM memory: ") + std::strerror(errno);
  Fd vcpu{ioctl(vm.fd, KVM_CREATE_VCPU, 0)};
  if (vcpu.fd < 0) return std::string("cannot create a vCPU: ") + std::strerror(errno);
  const int run_size = ioctl(kvm.fd, KVM_GET_VCPU_MMAP_SIZE, 0);
  if (run_size <= 0) return std::string("KVM_GET_VCPU_MMAP_SIZE failed");
  void* mapped = mmap(nullptr, run_size, PROT_READ | PROT_WRITE, MAP_SHARED, vcpu.fd, 0);
  if (mapped == MAP_FAILED) return std::string("cannot map the vCPU's run page");
  struct UnmapRun {
    void* p;
    int size;
    ~UnmapRun() { munmap(p, size); }
  } unmap_run{mapped, run_size};
  auto* run = static_cast<kvm_run*>(mapped);
  // Real mode at CS base 0, IP 0x1000.
  kvm_sregs sregs{};
  if (ioctl(vcpu.fd, KVM_GET_SREGS, &sregs) < 0) return std::string("KVM_GET_SREGS failed");
  sregs.cs.base = 0;
  sregs.cs.selector = 0;
  if (ioctl(vcpu.fd, KVM_SET_SREGS, &sregs) < 0) return std::string("KVM_SET_SREGS failed");
  kvm_regs regs{};
  regs.rip = kCode;
  regs.rflags = 2;
  if (ioctl(vcpu.fd, KVM_SET_REGS, &regs) < 0) return std::string("KVM_SET_REGS failed");

  // A stop where it must be: KVM_EXIT_DEBUG at `rip`; else what happened instead.
  auto stop_at = [&](uint64_t rip, const std::string& what) -> std::optional<std::string> {
    if (ioctl(vcpu.fd, KVM_RUN, 0) < 0)
      return what + ": KVM_RUN failed (" + std::strerror(errno) + ")";
    if (run->exit_reason != KVM_EXIT_DEBUG)
      return what + " did not stop the guest: " + exit_name(run->exit_reason);
    if (run->debug.arch.pc != rip)
      return what + " stopped the guest at " + hex(run->debug.arch.pc) + ", not at " + hex(rip);
    return std::nullopt;
  };
  kvm_guest_debug debug{};
  debug.control = KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_USE_HW_BP;
  debug.arch.debugreg[0] = kCode + 1;
  debug.arch.debugreg[7] = 1;  // L0: execution, one byte
  if (ioctl(vcpu.fd, KVM_SET_GUEST_DEBUG, &debug) < 0)
    return std::string("KVM_SET_GUEST_DEBUG failed: ") + std::strerror(errno);
  if (auto failed = stop_at(kCode + 1, "an execution breakpoint at " + hex(kCode + 1)))
    return failed;
  debug.control = KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_SINGLESTEP;
  debug.arch.debugreg[7] = 0;
  if (ioctl(vcpu.fd, KVM_SET_GUEST_DEBUG, &debug) < 0)
    return std::string("KVM_SET_GUEST_DEBUG failed: ") + std::strerror(errno);
  if (auto failed = stop_at(kCode + 2, "a single step from " + hex(kCode + 1))) return failed;
  return std::nullopt;
}

void check_kvm_serves(const std::string& device, bool stepping, bool linux_guest) {
  if (!stepping && !linux_guest) return;
  std::optional<std::string> missing;
  if (stepping) missing = guest_debug_self_test(device);
  if (linux_guest || missing) {
    // The likely reason first, when it is the one.
    std::ifstream in("/proc/cpuinfo");
    std::stringstream cpuinfo;
    cpuinfo << in.rdbuf();
    if (auto hardware = missing_hardware_virtualization(
            cpuinfo.str(), std::filesystem::exists("/sys/module/kvm_pvm")))
      missing = missing ? *hardware + "; " + *missing : *hardware;
  }
  if (missing)
    throw VmmError("the KVM at " + device + " cannot serve pmuvm: " + *missing +
                   "; tools/kvm-host/run runs pmuvm in a KVM host that can "
                   "(docs/nested-kvm-host.md)");
}

}  // namespace vmm
