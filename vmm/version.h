// Which pmuvm this is: `pmuvm --version` and the API's vmm.ping say it.
#pragma once

namespace vmm {

inline constexpr const char* kPmuvmVersion = "pmuvm 0.12";

}  // namespace vmm
