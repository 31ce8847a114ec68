// A one-vCPU VM on pmuvm's own KVM layer for the KVM benchmarks: 16 MiB of RAM with pmuvm's boot
// GDT and identity map, `code` at `code_gpa`, the vCPU in 64-bit mode at CPL 0 there, IF = 0.
// CPUID is what KVM supports (KVM accepts EFER.LME only with CPUID LM).
#pragma once

#include <cstdint>
#include <span>

#include "vmm/boot/long_mode.h"
#include "vmm/kvm/kvm_vcpu.h"
#include "vmm/kvm/kvm_vm.h"
#include "vmm/memory/guest_ram.h"

namespace bench {

struct ScratchVm {
  ScratchVm(std::span<const uint8_t> code, uint64_t code_gpa) {
    const vmm::LongModeState boot = vmm::setup_long_mode(ram);
    ram.write(code_gpa, std::as_bytes(code));
    vcpu.set_cpuid(kvm.supported_cpuid());
    vcpu.enter_long_mode(boot, code_gpa, 0, 0);
  }

  vmm::GuestRam ram{16 << 20};
  vmm::KvmSystem kvm;
  vmm::KvmVm vm{kvm, ram};
  vmm::KvmVcpu vcpu{vm, 0};
};

}  // namespace bench
