// Runs the pmuvm binary as a child process for end-to-end tests: arguments, exit status, stdout
// and stderr, under a hard time limit (a hang is a failure, never a stuck CI run).
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace pmuvm_e2e {

struct Result {
  int status = -1;  // exit status, or 128+signal
  std::string out, err;
};

// Path of a file in this test's runfiles ("vmm/pmuvm", "guest/programs/hello").
inline std::string runfile(const std::string& path) {
  const char* dir = std::getenv("TEST_SRCDIR");
  return std::string(dir ? dir : ".") + "/pmuvm/" + path;
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline Result run(const std::vector<std::string>& args, int timeout_seconds = 120) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp ? tmp : "/tmp";
  const std::string out_path = dir + "/pmuvm.out", err_path = dir + "/pmuvm.err";
  std::vector<std::string> argv = {"/usr/bin/timeout", "--kill-after=5",
                                   std::to_string(timeout_seconds), runfile("vmm/pmuvm")};
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = fork();
  if (pid == 0) {
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    dup2(err, 2);
    std::vector<char*> c;
    for (std::string& a : argv) c.push_back(a.data());
    c.push_back(nullptr);
    execv(c[0], c.data());
    _exit(127);
  }
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  Result r;
  r.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
}

// True when this machine can run guests; otherwise `why` says why not. Suites that need KVM run
// through tools/kvm-host/run, so false here is a failure of the set-up, never a reason to skip.
inline bool kvm_usable(std::string* why) {
  const int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    *why = std::string("/dev/kvm cannot be opened on this machine (") + strerror(errno) +
           "): run this suite through tools/kvm-host/run (bazel test does)";
    return false;
  }
  close(fd);
  return true;
}

}  // namespace pmuvm_e2e
