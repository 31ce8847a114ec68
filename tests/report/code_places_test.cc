// Function, file and line of guest code addresses (vmm/report/code_places.h), checked against
// GNU binutils, which nobody here wrote: for every function symbol of a bundled guest program
// (`nm`), an address inside it must be named by that symbol and the offset, with the file and
// line `addr2line` gives; addresses outside every symbol, and files that are no ELF, are not named.
#include "vmm/report/code_places.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace vmm {
namespace {

std::string runfile(const std::string& path) {
  const char* dir = std::getenv("TEST_SRCDIR");
  return std::string(dir ? dir : ".") + "/pmuvm/" + path;
}

// The standard output of `command` (binutils here).
std::string output_of(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) return "";
  std::string out;
  std::array<char, 4096> buffer;
  for (size_t n; (n = std::fread(buffer.data(), 1, buffer.size(), pipe.get())) > 0;)
    out.append(buffer.data(), n);
  return out;
}

struct Function {
  uint64_t address, size;
  std::string name;
};

// The program's function symbols with their sizes, by `nm`.
std::vector<Function> functions(const std::string& elf) {
  std::vector<Function> out;
  std::istringstream in(output_of("nm -S --defined-only " + elf));
  std::string address, size, type, name;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    if (!(fields >> address >> size >> type >> name) || (type != "T" && type != "t")) continue;
    out.push_back({std::stoull(address, nullptr, 16), std::stoull(size, nullptr, 16), name});
  }
  return out;
}

// "file.c:LINE" of `address` by `addr2line` (its directory and discriminator left out).
std::string addr2line(const std::string& elf, uint64_t address) {
  char hex[32];
  std::snprintf(hex, sizeof hex, "%#llx", static_cast<unsigned long long>(address));
  std::string line = output_of("addr2line -e " + elf + " " + hex);
  line = line.substr(0, line.find_first_of(" \n"));
  return line.substr(line.rfind('/') + 1);
}

TEST(CodePlacesTest, NamesEveryFunctionAsBinutilsDoes) {
  const std::string elf = runfile("guest/programs/lwp_demo");
  std::string why;
  const std::unique_ptr<CodePlaces> places = CodePlaces::open(elf, why);
  ASSERT_NE(places, nullptr) << why;
  const std::vector<Function> fns = functions(elf);
  ASSERT_GE(fns.size(), 10u) << "nm found too few functions in " << elf;
  int with_lines = 0;
  for (const Function& f : fns) {
    if (f.size < 2) continue;
    const uint64_t inside = f.address + f.size / 2;
    char offset[24];
    std::snprintf(offset, sizeof offset, "+%#llx", static_cast<unsigned long long>(f.size / 2));
    const std::string line = addr2line(elf, inside);
    const std::string expected = f.name + offset + (line.rfind("??", 0) == 0 ? "" : " " + line);
    EXPECT_EQ(places->describe(inside).value_or("(none)"), expected) << f.name;
    EXPECT_EQ(places->describe(f.address).value_or("(none)").substr(0, f.name.size() + 1),
              f.name + (line.rfind("??", 0) == 0 ? "" : " "))
        << f.name << " at its first byte: no offset";
    with_lines += line.rfind("??", 0) != 0;
  }
  EXPECT_GE(with_lines, 5) << "the guest programs carry DWARF lines (-g, guest/lib/flags.bzl)";
  EXPECT_EQ(places->describe(0x10), std::nullopt) << "below the program";
  EXPECT_EQ(places->describe(0xffffffff00000000ull), std::nullopt);
}

TEST(CodePlacesTest, AFileThatIsNoElfIsRefusedWithTheReason) {
  std::string why;
  EXPECT_EQ(CodePlaces::open(runfile("tests/report/code_places_test.cc"), why), nullptr);
  EXPECT_FALSE(why.empty());
  why.clear();
  EXPECT_EQ(CodePlaces::open("/nonexistent/elf", why), nullptr);
  EXPECT_EQ(why, "cannot open it");
  why.clear();
  EXPECT_EQ(CodePlaces::open("/dev/null", why), nullptr);
  EXPECT_EQ(why, "not a regular file");
}

TEST(CodePlacesTest, ATaskIsNamedFromItsOwnFileElseTheSharedOnes) {
  const std::string elf = runfile("guest/programs/lwp_demo");
  const std::vector<Function> fns = functions(elf);
  ASSERT_FALSE(fns.empty());
  const uint64_t address = fns.front().address;
  TaskCodePlaces places({{1, elf}, {2, "/nonexistent/elf"}}, {"/dev/null", elf});
  EXPECT_EQ(places(1, address).value_or("").substr(0, fns.front().name.size()), fns.front().name);
  EXPECT_EQ(places(2, address), std::nullopt) << "its own file cannot be read: hex";
  EXPECT_EQ(places(3, address).value_or("").substr(0, fns.front().name.size()), fns.front().name)
      << "no file of its own: the first shared file that knows the address";
}

}  // namespace
}  // namespace vmm
