// What pmuvm needs of the host's KVM beyond opening it, checked when a VM starts, so that a KVM
// that cannot serve ends the run at once with its reason (status 3) instead of spinning or
// counting nothing:
//  * hardware virtualization: svm or vmx in /proc/cpuinfo. A PVM KVM (kvm_pvm) has neither: its
//    /dev/kvm opens and answers API 12, but Linux guests hang in early boot there and KVM's
//    instruction breakpoints never fire, so the KVM stepper would count nothing
//    (tools/kvm-host/README.md);
//  * where the KVM stepper will count: a self-test of guest debugging. A real-mode guest of three
//    instructions runs with an execution breakpoint (KVM_GUESTDBG_USE_HW_BP, DR0) on its second
//    one, then single-steps (KVM_GUESTDBG_SINGLESTEP): each must stop exactly there.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace vmm {

// Why a host whose /proc/cpuinfo reads `cpuinfo` cannot run pmuvm's guests under KVM (`pvm`: the
// kvm_pvm module is loaded), or nullopt.
std::optional<std::string> missing_hardware_virtualization(std::string_view cpuinfo, bool pvm);

// The guest-debug self-test on the KVM at `device`: nullopt when both stops come where they must,
// else what happened instead ("the breakpoint at 0x1001 did not stop the guest: it ran to HLT").
std::optional<std::string> guest_debug_self_test(const std::string& device);

// What was asked of this host's KVM: a Linux guest needs hardware virtualization (/proc/cpuinfo,
// /sys/module/kvm_pvm), the KVM stepper (`stepping`) the guest-debug self-test. (The bundled
// kernel with the guest-assisted stepper runs on a PVM KVM too.) VmmError naming what is missing
// and pointing at tools/kvm-host/run when a check fails.
void check_kvm_serves(const std::string& device, bool stepping, bool linux_guest);

}  // namespace vmm
