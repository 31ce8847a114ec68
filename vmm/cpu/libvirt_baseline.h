// Cross-checks a migration baseline's x86 feature bits with libvirt (DESIGN §4.10): libvirt's
// virConnectBaselineCPU, asked through its test:///default driver (no daemon, no hypervisor:
// it reads the cpu_map Debian's libvirt0 ships), must arrive at the same AND of the members'
// feature bits as compute_baseline(). Two independent implementations of the AND agreeing is
// the check; a disagreement or no answer from libvirt is an error, never a silent skip.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "vmm/cpu/cpu_profile.h"

namespace vmm {

struct LibvirtCrossCheck {
  // Empty when libvirt agrees. Otherwise one line: libvirt's own message when it gave no answer,
  // or the features only one side has.
  std::string error;
  size_t agreed = 0;                      // x86 feature bits compared (the model's included)
  std::string model;                      // the model libvirt's answer names
  std::vector<std::string> unchecked;     // members' features libvirt has no name for (left out)
  std::vector<std::string> only_ours;     // in our baseline, not in libvirt's (our names)
  std::vector<std::string> only_libvirt;  // in libvirt's, not in ours (our names when known)
  bool ok() const { return error.empty(); }
};

// Asks libvirt for the baseline of `members` and compares its required features with
// x86_feature_bits(baseline) (libvirt_cpu_xml.h), leaving out the features libvirt has no name
// for.
LibvirtCrossCheck cross_check_with_libvirt(const std::vector<CpuProfile>& members,
                                           const CpuProfile& baseline);

}  // namespace vmm
