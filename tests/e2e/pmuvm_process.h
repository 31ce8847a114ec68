// Runs the pmuvm binary as a child process for end-to-end tests: arguments, exit status, stdout
// and stderr, under a hard time limit (a hang is a failure, never a stuck CI run).
#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
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

// A pmuvm process running in the background (migration tests run a source and a destination
// at once). Its stdout and stderr go to files of their own, readable while it runs.
class Child {
 public:
  Child(const std::vector<std::string>& args, int timeout_seconds = 120) {
    static int serial = 0;
    const char* tmp = std::getenv("TEST_TMPDIR");
    const std::string base = std::string(tmp ? tmp : "/tmp") + "/pmuvm." +
                             std::to_string(getpid()) + "." + std::to_string(serial++);
    out_path_ = base + ".out";
    err_path_ = base + ".err";
    std::vector<std::string> argv = {"/usr/bin/timeout", "--kill-after=5",
                                     std::to_string(timeout_seconds), runfile("vmm/pmuvm")};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = fork();
    if (pid_ == 0) {
      const int out = open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(out, 1);
      dup2(err, 2);
      std::vector<char*> c;
      for (std::string& a : argv) c.push_back(a.data());
      c.push_back(nullptr);
      execv(c[0], c.data());
      _exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // What it printed so far.
  std::string out() const { return slurp(out_path_); }
  std::string err() const { return slurp(err_path_); }
  // Sends `sig` (through timeout(1), which passes it on to pmuvm).
  void signal(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }
  // True once it has ended (the result is then in wait()).
  bool ended() {
    if (pid_ <= 0) return true;
    int wstatus = 0;
    if (waitpid(pid_, &wstatus, WNOHANG) != pid_) return false;
    status_ = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
    pid_ = 0;
    return true;
  }
  Result wait() {
    if (pid_ > 0) {
      int wstatus = 0;
      waitpid(pid_, &wstatus, 0);
      status_ = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
      pid_ = 0;
    }
    return Result{status_, out(), err()};
  }

 private:
  pid_t pid_ = -1;
  int status_ = -1;
  std::string out_path_, err_path_;
};

// Waits until what the child printed on stderr contains `text` (pmuvm's own lines, such as
// "pmuvm: paused: "): true when it does; false when the child ended first or `timeout_seconds`
// passed, with `why` saying what was awaited and what was seen. Polls the output file: the
// wait is for something the guest or the VMM did, never for a stretch of time.
inline bool wait_for_stderr(Child& child, const std::string& text, int timeout_seconds,
                            std::string* why) {
  for (int polls = 0; polls < timeout_seconds * 50; ++polls) {
    if (child.err().find(text) != std::string::npos) return true;
    if (child.ended()) {
      const Result r = child.wait();
      *why = "awaited \"" + text + "\" on stderr, but pmuvm ended with status " +
             std::to_string(r.status) + "\n--- stdout\n" + r.out + "--- stderr\n" + r.err;
      return false;
    }
    usleep(20'000);
  }
  *why = "awaited \"" + text + "\" on stderr for " + std::to_string(timeout_seconds) +
         " s; seen so far:\n--- stdout\n" + child.out() + "--- stderr\n" + child.err();
  return false;
}

// Waits (up to 60 s, 20 ms polls of the file) until `owner` has created the socket of its
// `run --incoming unix:PATH` at `path`. pmuvm makes it appear only once it listens (bound as
// PATH.new, renamed); a probe connection, as wait_until_listening makes, would be taken for the
// migration. The caller removed any stale file first.
inline bool wait_for_incoming_socket(const std::string& path, Child& owner) {
  struct stat st {};
  for (int polls = 0; polls < 3000; ++polls) {
    if (::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) return true;
    if (owner.ended()) return false;
    usleep(20'000);
  }
  return false;
}

// Waits until a process listens on the Unix socket at `path` (a connect succeeds): the socket
// file alone may be a stale one left by a process that ended. True when it does; false when
// `owner` ended first or `timeout_seconds` passed. Only for API sockets: a migration destination
// would take the probe's connection as its migration.
inline bool wait_until_listening(const std::string& path, Child& owner, int timeout_seconds = 60) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return false;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  for (int polls = 0; polls < timeout_seconds * 50; ++polls) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool listening = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    close(fd);
    if (listening) return true;
    if (owner.ended()) return false;
    usleep(20'000);
  }
  return false;
}

// How many times `needle` occurs in `text` (overlapping occurrences too).
inline size_t occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// The precise backend's counted instructions of a run with --stats, all vCPUs together
// ("pmuvm: vcpuN: ..., counted instructions I" lines on stderr); 0 when there are none.
inline uint64_t counted_instructions(const std::string& stderr_text) {
  uint64_t total = 0;
  const std::string key = ", counted instructions ";
  for (size_t at = stderr_text.find(key); at != std::string::npos;
       at = stderr_text.find(key, at + 1))
    total += std::stoull(stderr_text.substr(at + key.size()));
  return total;
}

inline Result run(const std::vector<std::string>& args, int timeout_seconds = 120) {
  return Child(args, timeout_seconds).wait();
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
