/* See counted_window.h. */
#include "guest/linux/counted_window.h"

#include <linux/perf_event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define RING_RECORDS 4096u

int counter_open(struct counter *c, const char *mode) {
  memset(c, 0, sizeof *c);
  if (strcmp(mode, "none") == 0) {
    c->none = 1;
    c->fd = -1;
    return 0;
  }
  if (strcmp(mode, "perf") == 0) {
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_HARDWARE;
    attr.config = PERF_COUNT_HW_INSTRUCTIONS;
    attr.disabled = 1;
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    c->fd = (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
    if (c->fd < 0) {
      say("FAIL: perf_event_open instructions:u: %m\n");
      return -1;
    }
    return 0;
  }
  if (strcmp(mode, "lwp") == 0) {
    c->lwp = 1;
    c->capacity = RING_RECORDS;
    c->cb = aligned_alloc(4096, 4096);
    c->ring = mmap(NULL, RING_RECORDS * LWP_RECORD_SIZE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (!c->cb || c->ring == MAP_FAILED) {
      say("FAIL: no memory for the LWPCB and its ring\n");
      return -1;
    }
    counter_reset(c);
    return 0;
  }
  say("FAIL: mode %s: perf, lwp or none\n", mode);
  return -1;
}

void counter_reset(struct counter *c) {
  if (!c->lwp) return;
  memset(c->cb, 0, sizeof *c->cb);
  memset(c->ring, 0, (size_t)c->capacity * LWP_RECORD_SIZE);
  c->cb->buffer_size = c->capacity * LWP_RECORD_SIZE;
  c->cb->buffer_base = (uint64_t)(uintptr_t)c->ring;
  c->cb->events[0].interval_id = lwp_event(LWP_EVENT_INSTRUCTIONS, 1);
}

int64_t counter_read(struct counter *c) {
  if (c->none) return -1;
  if (!c->lwp) {
    uint64_t count = 0;
    if (read(c->fd, &count, sizeof count) != (ssize_t)sizeof count) {
      say("FAIL: read of the perf counter: %m\n");
      return -1;
    }
    return (int64_t)count;
  }
  if (c->cb->missed != 0) {
    say("FAIL: LWP missed %llu events (ring of %u records)\n", (unsigned long long)c->cb->missed,
        c->capacity);
    return -1;
  }
  return c->cb->head / LWP_RECORD_SIZE;
}

uint64_t counter_record_rip(const struct counter *c, uint32_t i) { return c->ring[i].rip; }

long window_count_arg(int argc, char **argv, int index, long fallback, long lo, long hi,
                      const char *what) {
  const long value = argc > index ? strtol(argv[index], NULL, 0) : fallback;
  if (value >= lo && value <= hi) return value;
  say("%s must be %ld..%ld\n", what, lo, hi);
  return -1;
}
