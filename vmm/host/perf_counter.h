// Host counters for the host counting backend ("passing through host counters", issue 4):
// a perf_event counter on one vCPU thread, guest-only (exclude_host), with the virtual counter's
// CPL filter mapped to exclude_user/exclude_kernel, a sample period equal to the virtual
// counter's remaining count, and each overflow signalled to that vCPU thread (F_SETOWN_EX with
// the thread id) so KVM_RUN returns with EINTR and the VMM gathers the record at the guest RIP.
//
// Skid: the signal arrives after the overflow, so the guest RIP the VMM sees is the instruction
// at which KVM_RUN was interrupted, typically a few to a few hundred instructions after the one
// that overflowed (more across taken branches). Records from this backend are therefore sampled
// with skid, unlike the precise backend's. No hardware events exist on the project machines:
// the plumbing is tested with a software event (task-clock) standing in.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

namespace vmm {

struct HostEventSpec {
  uint32_t type = 0;          // PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE, PERF_TYPE_RAW, ...
  uint64_t config = 0;
  bool count_user = true;     // CPL 3 (virtual filter USR)
  bool count_kernel = false;  // CPL 0 (virtual filter OS)
  bool guest_only = true;     // exclude_host: count only while the thread runs guest code
};

class PerfCounter {
 public:
  // Opens the counter on thread `tid` (0 = the calling thread), disabled. With a non-zero
  // `sample_period`, each overflow sends `signal` to that thread. The error is one line.
  static std::variant<PerfCounter, std::string> open(const HostEventSpec& spec,
                                                     uint64_t sample_period, int signal,
                                                     pid_t tid = 0);
  PerfCounter(PerfCounter&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  PerfCounter& operator=(PerfCounter&& other) noexcept;
  PerfCounter(const PerfCounter&) = delete;
  ~PerfCounter();

  void enable();
  void disable();
  void reset();
  uint64_t read() const;
  // Changes the sample period (the virtual counter's remaining count) for the next overflow.
  void set_period(uint64_t period);
  // Re-arms overflow notification after one was delivered.
  void refresh();
  int fd() const { return fd_; }

 private:
  explicit PerfCounter(int fd) : fd_(fd) {}
  int fd_ = -1;
};

struct HostPmuProbe {
  bool hardware_events = false;  // a guest-only hardware instruction counter can be opened
  std::string detail;            // why not, or which event worked
};

// Tries PERF_TYPE_HARDWARE/INSTRUCTIONS with exclude_host on the calling thread.
HostPmuProbe probe_host_pmu();

// `--backend auto|precise|host` -> "precise" or "host", with the reason for the log. "host"
// without hardware events is an error (one line) rather than a silent fallback.
std::variant<std::string, std::string> choose_backend(const std::string& requested,
                                                      const HostPmuProbe& probe,
                                                      std::string* reason);

}  // namespace vmm
