// Base fixture of the end-to-end suites that boot guests: they run on a KVM host
// (tests/kvm_host_test.bzl), so a missing /dev/kvm fails every case with the reason.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tests/e2e/pmuvm_process.h"

namespace pmuvm_e2e {

class GuestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!kvm_usable(&why)) FAIL() << why;
  }
  static std::string program(const std::string& name) { return runfile("guest/programs/" + name); }
  // A file in this test's scratch directory.
  static std::string temp(const std::string& name) {
    const char* dir = std::getenv("TEST_TMPDIR");
    return std::string(dir ? dir : "/tmp") + "/" + name;
  }
};

}  // namespace pmuvm_e2e
