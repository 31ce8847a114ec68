// A shipped CPU profile for tests that start from one: parsed, or a test failure and an empty
// profile when it does not parse.
#pragma once

#include <gtest/gtest.h>

#include <string_view>

#include "vmm/cpu/cpu_profile.h"

namespace vmm::testing {

inline CpuProfile Builtin(std::string_view name) {
  Result<CpuProfile> r = builtin_profile(name);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? *r : CpuProfile{};
}

}  // namespace vmm::testing
