#include "vmm/host/perf_counter.h"

#include <fcntl.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "vmm/vmm_error.h"
#include "vmm/result.h"

namespace vmm {
namespace {

int perf_event_open(perf_event_attr* attr, pid_t tid) {
  return static_cast<int>(syscall(SYS_perf_event_open, attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC));
}

}  // namespace

Result<PerfCounter> PerfCounter::open(const HostEventSpec& spec, uint64_t sample_period, int signal,
                                      pid_t tid) {
  perf_event_attr attr{};
  attr.size = sizeof attr;
  attr.type = spec.type;
  attr.config = spec.config;
  attr.disabled = 1;
  attr.exclude_user = spec.count_user ? 0 : 1;
  attr.exclude_kernel = spec.count_kernel ? 0 : 1;
  attr.exclude_hv = 1;
  attr.exclude_host = spec.guest_only ? 1 : 0;
  if (sample_period) {
    attr.sample_period = sample_period;
    attr.wakeup_events = 1;  // notify on every overflow
  }
  const int fd = perf_event_open(&attr, tid);
  if (fd < 0)
    return Error::vmm(std::string("perf_event_open(type ") + std::to_string(spec.type) +
                      ", config " + std::to_string(spec.config) + "): " + std::strerror(errno));
  PerfCounter counter(fd);
  if (sample_period) {
    f_owner_ex owner{F_OWNER_TID, tid ? tid : static_cast<pid_t>(syscall(SYS_gettid))};
    if (fcntl(fd, F_SETOWN_EX, &owner) < 0 || fcntl(fd, F_SETSIG, signal) < 0 ||
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_ASYNC) < 0)
      return Error::vmm(std::string("cannot route perf overflows to the vCPU thread: ") +
                        std::strerror(errno));
  }
  return counter;
}

PerfCounter& PerfCounter::operator=(PerfCounter&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

PerfCounter::~PerfCounter() {
  if (fd_ >= 0) close(fd_);
}

void PerfCounter::enable() {
  if (ioctl(fd_, PERF_EVENT_IOC_ENABLE, 0) < 0) throw_errno("PERF_EVENT_IOC_ENABLE");
}
void PerfCounter::disable() {
  if (ioctl(fd_, PERF_EVENT_IOC_DISABLE, 0) < 0) throw_errno("PERF_EVENT_IOC_DISABLE");
}
void PerfCounter::reset() {
  if (ioctl(fd_, PERF_EVENT_IOC_RESET, 0) < 0) throw_errno("PERF_EVENT_IOC_RESET");
}
void PerfCounter::set_period(uint64_t period) {
  if (ioctl(fd_, PERF_EVENT_IOC_PERIOD, &period) < 0) throw_errno("PERF_EVENT_IOC_PERIOD");
}
void PerfCounter::refresh() {
  if (ioctl(fd_, PERF_EVENT_IOC_REFRESH, 1) < 0) throw_errno("PERF_EVENT_IOC_REFRESH");
}

uint64_t PerfCounter::read() const {
  uint64_t value = 0;
  if (::read(fd_, &value, sizeof value) != sizeof value) throw_errno("read of a perf counter");
  return value;
}

}  // namespace vmm
