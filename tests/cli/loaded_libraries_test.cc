// What a pmuvm process loads before main() runs (issue 21: a lean process). The dynamic loader
// lists it without running the program (LD_TRACE_LOADED_OBJECTS=1, what ldd does), so this needs
// no KVM. libvirt (57 libraries) is dlopen'ed by `profiles --baseline` alone; the API socket's
// HTTP parser is a few kB of C instead of cpp-httplib's OpenSSL and Brotli.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/pmuvm_process.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// One line per object the loader maps: "libx.so.1 => /lib/.../libx.so.1 (0x...)" and the
// interpreter; linux-vdso is the kernel's and maps nothing.
std::vector<std::string> loaded_objects(const std::string& binary) {
  const std::string command = "LD_TRACE_LOADED_OBJECTS=1 '" + binary + "' 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::vector<std::string> objects;
  if (!pipe) return objects;
  char line[1024];
  while (std::fgets(line, sizeof line, pipe)) {
    std::string s(line);
    if (s.find("linux-vdso") != std::string::npos) continue;
    while (!s.empty() && (s.back() == '\n' || s.front() == '\t' || s.front() == ' ')) {
      if (s.back() == '\n')
        s.pop_back();
      else
        s.erase(0, 1);
    }
    if (!s.empty()) objects.push_back(s);
  }
  pclose(pipe);
  return objects;
}

TEST(LoadedLibraries, PmuvmLoadsAtMostTwelveSharedObjectsAndNoneOfTheHeavyOnes) {
  const std::vector<std::string> objects = loaded_objects(pmuvm_e2e::runfile("vmm/pmuvm"));
  std::ostringstream all;
  for (const std::string& o : objects) all << o << '\n';
  ASSERT_GE(objects.size(), 3u) << "the loader listed nothing:\n" << all.str();
  EXPECT_LE(objects.size(), 12u) << all.str();
  // libdw (elfutils) is dlopen'ed when a report names its addresses (vmm/report/code_places.h).
  for (const char* heavy : {"libvirt", "libssl", "libcrypto", "libbrotli", "libcpp-httplib",
                            "libicu", "libgnutls", "libxml2", "libglib", "libdw", "libelf"})
    EXPECT_THAT(all.str(), Not(HasSubstr(heavy))) << all.str();
}

}  // namespace
