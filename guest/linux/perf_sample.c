/* perf_sample [N [P [pp]]]: Linux's perf samples exactly. The window of perf_loop.h (8N + 4
 * instructions) on PERF_COUNT_HW_INSTRUCTIONS (exclude_kernel, exclude_hv) with sample_period P
 * and PERF_SAMPLE_IP into an mmap'ed ring of 1 + 8 pages. The driver presets the counter to -P;
 * it overflows on the P-th event and that event raises the PMI (DESIGN.md §4.4), whose handler
 * takes a sample and presets -P again. So samples = floor((8N + 4) / P) exactly, sample j taken
 * after event jP with the interrupted IP = the address of the window's instruction jP + 1
 * (perf_trace()). P must not divide 8N + 4: the last event is the DISABLE syscall, after which the
 * interrupted IP is the kernel's. Defaults N = 1000, P = 997: 8004 events, 8 samples, remainder 28.
 * With "pp" the event has precise_ip 2, PEBS on Intel: a record per overflow with the eventing
 * IP, which Linux reports as the sample's IP with PERF_RECORD_MISC_EXACT_IP: sample j is then the
 * address of instruction jP itself, and every sample must say EXACT.
 * Also: the read() count must be 8N + 4, and no PERF_RECORD_LOST/THROTTLE/UNTHROTTLE (before
 * opening it sets kernel.perf_cpu_time_max_percent = 0, so a slow, nested PMI handler does not
 * lower the sample rate limit). Prints "perf_sample: instructions C samples S expected E period P"
 * and exits 0 only when everything matched; otherwise every sample and what differed. */
#include <fcntl.h>
#include <linux/perf_event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "guest/linux/perf_loop.h"

#define DATA_PAGES 8

static void write_file(const char *path, const char *text) {
  const int fd = open(path, O_WRONLY);
  if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
    say("perf_sample: note: could not write %s to %s\n", text, path);
  if (fd >= 0) close(fd);
}

int main(int argc, char **argv) {
  const long n = argc > 1 ? atol(argv[1]) : 1000, period = argc > 2 ? atol(argv[2]) : 997;
  const int precise = argc > 3 && strcmp(argv[3], "pp") == 0;
  const uint64_t total = perf_loop_count((uint64_t)(n > 0 ? n : 0));
  if (n < 1 || n > 1000000 || period < 2 || total % (uint64_t)period == 0 ||
      total / (uint64_t)period > 1000 || (argc > 3 && !precise)) {
    say("usage: perf_sample [N [P [pp]]]: P >= 2 must not divide 8N + 4, at most 1000 samples\n");
    return 2;
  }
  write_file("/proc/sys/kernel/perf_cpu_time_max_percent", "0");
  const int fd = perf_open_instructions((uint64_t)period, precise ? 2 : 0);
  if (fd < 0) {
    say("perf_sample: FAIL: perf_event_open: %m\n");
    return 1;
  }
  const long page = sysconf(_SC_PAGESIZE);
  const size_t map_size = (size_t)page * (1 + DATA_PAGES);
  struct perf_event_mmap_page *meta = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (meta == MAP_FAILED) {
    say("perf_sample: FAIL: mmap of the ring: %m\n");
    return 1;
  }
  size_t length = 0;
  struct dyn_insn *trace = perf_trace((uint64_t)n, &length);
  if (!trace) {
    say("perf_sample: FAIL: no memory for the trace\n");
    return 1;
  }
  long enabled = -1;
  const long disabled = perf_loop(fd, (uint64_t)n, &enabled);
  uint64_t count = 0;
  const ssize_t r = read(fd, &count, sizeof count);
  int bad = enabled != 0 || disabled != 0 || r != (ssize_t)sizeof count || count != total;

  const uint64_t head = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE);
  const uint64_t data_offset = meta->data_offset ? meta->data_offset : (uint64_t)page;
  const uint64_t data_size = meta->data_size ? meta->data_size : (uint64_t)page * DATA_PAGES;
  const unsigned char *data = (const unsigned char *)meta + data_offset;
  const uint64_t expected = total / (uint64_t)period;
  uint64_t samples = 0, others = 0;
  const uint64_t first = trace[0].rip;
  for (uint64_t at = meta->data_tail; at < head;) {
    struct perf_event_header h;
    unsigned char record[256];
    for (size_t i = 0; i < sizeof h; ++i) ((unsigned char *)&h)[i] = data[(at + i) % data_size];
    if (h.size < sizeof h || h.size > sizeof record) {
      say("perf_sample: FAIL: corrupt record header (size %u) at %llu\n", h.size,
          (unsigned long long)at);
      bad = 1;
      break;
    }
    for (size_t i = 0; i < h.size; ++i) record[i] = data[(at + i) % data_size];
    at += h.size;
    if (h.type != PERF_RECORD_SAMPLE) {
      say("perf_sample: FAIL: record type %u (2 LOST, 5 THROTTLE, 6 UNTHROTTLE)\n", h.type);
      ++others;
      bad = 1;
      continue;
    }
    uint64_t ip;
    memcpy(&ip, record + sizeof h, sizeof ip);
    ++samples;
    const uint64_t event = samples * (uint64_t)period; /* 1-based: the overflowing instruction */
    /* After the instruction: instruction event + 1; PEBS: instruction event itself. */
    const uint64_t want = precise ? trace[event - 1].rip : event < total ? trace[event].rip : 0;
    const int exact = (h.misc & PERF_RECORD_MISC_EXACT_IP) != 0;
    const int ok = ip == want && exact == precise;
    say("perf_sample: sample %llu: ip=start+%lld (%s instruction %llu: want start+%lld)%s%s\n",
        (unsigned long long)samples, (long long)(ip - first), precise ? "at" : "after",
        (unsigned long long)event, (long long)(want - first), exact ? " exact" : "",
        ok ? "" : " DIFFERS");
    if (!ok) bad = 1;
    if (ip < first || ip > perf_disable_syscall())
      say("perf_sample: FAIL: sample %llu outside the window\n", (unsigned long long)samples);
  }
  say("perf_sample: instructions %llu expected %llu samples %llu expected %llu period %ld%s\n",
      (unsigned long long)count, (unsigned long long)total, (unsigned long long)samples,
      (unsigned long long)expected, period, precise ? " precise" : "");
  if (enabled != 0 || disabled != 0 || r != (ssize_t)sizeof count)
    say("perf_sample: FAIL: ioctl ENABLE %ld, DISABLE %ld, read %zd\n", enabled, disabled, r);
  if (samples != expected || others) bad = 1;
  say("perf_sample: %s\n", bad ? "FAILED" : "exact");
  return bad;
}
