#include "vmm/vmm_error.h"

#include <cerrno>
#include <cstring>

namespace vmm {

void throw_errno(const std::string& what) { throw VmmError(what + ": " + std::strerror(errno)); }

}  // namespace vmm
