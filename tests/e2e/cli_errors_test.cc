// pmuvm's bad-input paths, end to end through the real binary (DESIGN §4.6, issue 3): each is a
// one-line reason and exit status 2 (usage) or 3 (VMM/KVM), never a crash or a hang. These run on
// every machine: all inputs are checked before KVM is touched.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "tests/e2e/pmuvm_process.h"
#include "tests/support/bzimage_builder.h"
#include "tests/support/elf_builder.h"

namespace {

using pmuvm_e2e::run;
using pmuvm_e2e::runfile;

std::string hello() { return runfile("guest/programs/hello"); }

bool one_line(const std::string& s) { return !s.empty() && s.find('\n') == s.size() - 1; }

// The last line of stderr (warnings may precede the error line).
std::string last_line(const std::string& s) {
  std::string t = s;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  const size_t nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

TEST(CliErrors, MissingProgram) {
  auto r = run({"run", "--", "/nonexistent/prog.elf"});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(last_line(r.err),
            "pmuvm: /nonexistent/prog.elf: cannot open (No such file or directory)");
}

TEST(CliErrors, NonElfProgram) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/notes.txt";
  std::ofstream(path) << std::string(200, 'x') << "\n";  // longer than an ELF header
  auto r = run({"run", "--", path});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(last_line(r.err), "pmuvm: " + path + ": not an ELF file");
}

TEST(CliErrors, ProgramOverlappingTheKernel) {
  // A valid static executable linked at 1 MiB, where the bundled kernel lives.
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/low.elf";
  auto bytes = pmu::testing::make_elf({{0x100000, 0x1000, 0x10, PF_R | PF_X}}, 0x100000);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  auto r = run({"run", "--", path});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(last_line(r.err).find(path + ": segment 0x100000-0x101000 overlaps the kernel"),
            std::string::npos)
      << r.err;
}

TEST(CliErrors, MemoryTooSmall) {
  auto r = run({"run", "--mem", "4", "--", hello()});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(last_line(r.err).find("--mem 4 MiB is too small"), std::string::npos) << r.err;
  EXPECT_NE(last_line(r.err).find("need at least"), std::string::npos) << r.err;
}

TEST(CliErrors, UnknownProfileAndBadProfileFile) {
  auto r = run({"run", "--cpu", "pentium-9", "--", hello()});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(last_line(r.err).rfind("pmuvm: unknown CPU profile 'pentium-9'", 0), 0u) << r.err;
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/bad.json";
  std::ofstream(path) << "{\n  \"name\": \"x\",\n  \"vendor\": ,\n}\n";  // syntax error, line 3
  auto f = run({"run", "--cpu", path, "--", hello()});
  EXPECT_EQ(f.status, 2);
  EXPECT_NE(last_line(f.err).find(path + ":3:"), std::string::npos) << "line-precise: " << f.err;
}

TEST(CliErrors, UsageErrorsAreOneLine) {
  for (auto args : std::vector<std::vector<std::string>>{{"run"},
                                                         {"run", "--vcpus", "0", "--", "x"},
                                                         {"bogus"},
                                                         {"run", "--backend", "x", "--", "x"}}) {
    auto r = run(args);
    EXPECT_EQ(r.status, 2) << ::testing::PrintToString(args);
    EXPECT_TRUE(one_line(r.err)) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

// A file with a bzImage setup header (protocol `version`), enough to reach each check.
std::string fake_bzimage(const std::string& name, uint16_t version) {
  const std::vector<uint8_t> b = pmu::testing::make_bzimage(version, 4096);
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
  return path;
}

// Linux guests (DESIGN §4.9): every bad input is status 2 and one line, before KVM is opened
// (--kvm-device points nowhere: reaching KVM would be status 3).
TEST(CliErrors, LinuxKernelInputs) {
  const std::string ok = fake_bzimage("bzImage", 0x020F);
  const std::string old = fake_bzimage("old-bzImage", 0x0206);
  const std::string big = std::string(std::getenv("TEST_TMPDIR")) + "/big.cpio";
  std::ofstream(big, std::ios::binary) << std::string(40u << 20, 'x');
  const std::string nokvm = "/nonexistent/kvm";
  struct Case {
    std::vector<std::string> args;
    std::string error;
  } cases[] = {
      {{"run", "--kvm-device", nokvm, "--kernel", old},
       "pmuvm: " + old +
           ": boot protocol 2.06 is too old; pmuvm needs 2.12 or later (Linux 3.8+) "
           "for the 64-bit entry point"},
      {{"run", "--kvm-device", nokvm, "--kernel", ok, "--", hello()},
       "pmuvm: " + ok +
           " is a Linux kernel: it runs what its initramfs holds, not programs after "
           "`--` (put them into --initrd)"},
      {{"run", "--kvm-device", nokvm, "--kernel", hello(), "--initrd", big, "--", hello()},
       "pmuvm: " + hello() +
           " is not a Linux bzImage; --initrd and --cmdline are for Linux guests"},
      {{"run", "--kvm-device", nokvm, "--mem", "48", "--kernel", ok, "--initrd", big},
       "pmuvm: " + big + ": the initrd (40 MiB) does not fit in RAM beside " + ok +
           " (needs --mem of at least 65 MiB)"},
      {{"run", "--kvm-device", nokvm, "--kernel", ok, "--initrd", "/nonexistent/rd"},
       "pmuvm: cannot read initrd /nonexistent/rd: cannot open (No such file or directory)"},
      // Kind and size before a byte is read: /dev/zero was read until memory ran out.
      {{"run", "--kvm-device", nokvm, "--kernel", "/dev/zero"},
       "pmuvm: cannot read kernel /dev/zero: not a regular file"},
      {{"run", "--kvm-device", nokvm, "--mem", "32", "--kernel", ok, "--initrd", big},
       "pmuvm: cannot read initrd " + big +
           ": 41943040 bytes, larger than the guest's 32 MiB of RAM (--mem)"},
      {{"run", "--kvm-device", nokvm, "--kernel", ok, "--cmdline", std::string(3000, 'x')},
       "pmuvm: --cmdline is 3000 bytes; " + ok + " accepts at most 2047"},
      {{"run", "--kvm-device", nokvm, "--stepper", "guest", "--kernel", ok},
       "pmuvm: --stepper guest needs the bundled kernel's help; a Linux guest is counted with "
       "--stepper kvm (the default)"},
  };
  for (const Case& c : cases) {
    auto r = run(c.args);
    EXPECT_EQ(r.status, 2) << c.error;
    EXPECT_EQ(last_line(r.err), c.error);
  }
}

// Errors quote what came from outside (a profile's keys, a snapshot manifest's file names): they
// reach the terminal escaped, whatever the message (before, a manifest's file name was printed
// raw: a snapshot could clear the screen of whoever restored it).
TEST(CliErrors, ErrorsAreEscaped) {
  const std::string tmp = std::getenv("TEST_TMPDIR");
  std::ofstream(tmp + "/escapes.json")
      << "{\"name\": \"x\", \"description\": \"d\", \"\\u001b[2Jboom\": 1}";
  const std::string dir = tmp + "/escapes.snapshot";
  std::filesystem::create_directories(dir);
  std::string manifest =
      pmuvm_e2e::slurp(pmuvm_e2e::runfile("tests/snapshot/golden/lwp_kvm.manifest.json"));
  manifest.replace(manifest.find("\"files\": {"), 10,
                   "\"files\": {\"\\u001b[2Jevil\": {\"bytes\": 1, \"xxh64\": \"zz\"},");
  std::ofstream(dir + "/manifest.json") << manifest;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"run", "--cpu", tmp + "/escapes.json", "--", hello()},
        std::vector<std::string>{"profiles", tmp + "/escapes.json"},
        std::vector<std::string>{"restore", "--source", "file://" + dir}}) {
    auto r = run(args);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("\\x1b[2J"), std::string::npos) << r.err;
  }
}

TEST(CliErrors, NoKvmIsExitThreeWithReason) {
  auto r = run({"run", "--kvm-device", "/nonexistent/kvm", "--", hello()});
  EXPECT_EQ(r.status, 3);
  EXPECT_EQ(last_line(r.err),
            "pmuvm: cannot open /nonexistent/kvm: No such file or directory (KVM is not available "
            "on this host); tools/kvm-host/run runs pmuvm in a KVM host (docs/nested-kvm-host.md)")
      << r.err;
  // Something that opens but is no KVM.
  r = run({"run", "--kvm-device", "/dev/null", "--", hello()});
  EXPECT_EQ(r.status, 3);
  EXPECT_EQ(last_line(r.err),
            "pmuvm: /dev/null is not a KVM device (KVM_GET_API_VERSION fails); tools/kvm-host/run "
            "runs pmuvm in a KVM host (docs/nested-kvm-host.md)")
      << r.err;
}

TEST(Cli, HelpAndProfiles) {
  auto h = run({"--help"});
  EXPECT_EQ(h.status, 0);
  EXPECT_NE(h.out.find("run"), std::string::npos);
  auto p = run({"profiles"});
  EXPECT_EQ(p.status, 0);
  for (const char* name : {"amd-lwp  ", "amd-lwp-lite  ", "amd-lwp-baseline  ", "intel-netburst  "})
    EXPECT_NE(p.out.find(name), std::string::npos) << name;
  auto d = run({"profiles", "amd-lwp"});
  EXPECT_EQ(d.status, 0);
  EXPECT_NE(
      d.out.find("CPUID 0x8000001C eax=0x8000000f ebx=0x01032040 ecx=0xc000002a edx=0x0000001f"),
      std::string::npos)
      << d.out;
}

}  // namespace
