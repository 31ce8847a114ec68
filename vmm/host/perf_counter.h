// One perf_event counter on one thread, as the host backend uses it (DESIGN §4.11;
// vmm/host/perf_host_counters.h): guest-only (exclude_host), the counted CPLs as
// exclude_user/exclude_kernel, and each overflow signalled to the owning thread (F_SETOWN_EX
// with its thread id, F_SETSIG, O_ASYNC), so a vCPU thread's KVM_RUN returns with EINTR. The
// skid — the signal comes some instructions after the overflow — is the free-run plan's
// business (vmm/host/free_run.h). The project machines have no hardware events: this plumbing is
// tested with a software event (task-clock) standing in.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <variant>

#include "vmm/result.h"

namespace vmm {

struct HostEventSpec {
  uint32_t type = 0;  // PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE, PERF_TYPE_RAW, ...
  uint64_t config = 0;
  bool count_user = true;     // CPL 3 (virtual filter USR)
  bool count_kernel = false;  // CPL 0 (virtual filter OS)
  bool guest_only = true;     // exclude_host: count only while the thread runs guest code
};

class PerfCounter {
 public:
  // Opens the counter on thread `tid` (0 = the calling thread), disabled. With a non-zero
  // `sample_period`, each overflow sends `signal` to that thread. The error is one line.
  static Result<PerfCounter> open(const HostEventSpec& spec, uint64_t sample_period, int signal,
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

}  // namespace vmm
