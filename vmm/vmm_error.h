// A failure of the VMM or of KVM (DESIGN §4.6: exit status 3 with a one-line reason), as
// opposed to a usage error (status 2) or the guest's own exit status.
#pragma once

#include <stdexcept>
#include <string>

namespace vmm {

class VmmError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input from the user (DESIGN §4.6: exit status 2): options, profiles, program files, a
// guest that does not fit. Always detected before KVM is touched.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "what: strerror(errno)" for a failed system call.
[[noreturn]] void throw_errno(const std::string& what);

}  // namespace vmm
