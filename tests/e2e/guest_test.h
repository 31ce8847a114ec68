// Base fixture of the end-to-end suites that boot guests: they run on a KVM host
// (tests/kvm_host_test.bzl), so a missing /dev/kvm fails every case with the reason.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <sstream>
#include <string>

#include "tests/e2e/pmuvm_process.h"

namespace pmuvm_e2e {

// The precise backend's steppers (DESIGN §4.7). Every exactness case runs under each and expects
// the same values and byte-identical records: the KVM stepper with block stepping (the default),
// the KVM stepper with one exit per instruction, the bundled kernel's guest-assisted one, and the
// KVM stepper with the embedded TCG in front (emulate: counted user code where the models need
// counts only).
inline constexpr std::array<const char*, 4> kSteppers = {"kvm", "kvm-single", "guest", "emulate"};

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
  // The console lines of `r` that start with `prefix` ("lwp_pair:"), one per line, without the
  // carriage returns of a Linux serial console.
  static std::string lines(const Result& r, const std::string& prefix) {
    std::istringstream in(r.out);
    std::string line, kept;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.rfind(prefix, 0) == 0) kept += line + "\n";
    }
    return kept;
  }
  // Everything `r` printed on the console, without the carriage returns of a Linux serial
  // console.
  static std::string console(const Result& r) {
    std::string out = r.out;
    out.erase(std::remove(out.begin(), out.end(), '\r'), out.end());
    return out;
  }
  // The standard output and error of a shell command (Debian's perf here).
  static std::string output_of(const std::string& command) {
    FILE* pipe = popen((command + " 2>&1").c_str(), "r");
    std::string out;
    if (!pipe) return out;
    char buffer[4096];
    for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
    pclose(pipe);
    return out;
  }
  // How many lines of `text` contain a match of `pattern` (perf script's samples, say).
  static int lines_matching(const std::string& text, const std::regex& pattern) {
    std::istringstream in(text);
    int n = 0;
    for (std::string line; std::getline(in, line);) n += std::regex_search(line, pattern);
    return n;
  }
  // Everything a run said, for a failure message.
  static std::string dump(const Result& r) {
    return "exit status " + std::to_string(r.status) + "\n--- stdout\n" + r.out + "--- stderr\n" +
           r.err;
  }
};

}  // namespace pmuvm_e2e
