/* Helpers of the Linux guest programs: see lwp_linux.h. */
#define _GNU_SOURCE
#include "guest/linux/lwp_linux.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void say(const char *format, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, format);
  int n = vsnprintf(line, sizeof line, format, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n >= sizeof line) n = sizeof line - 1;
  for (int done = 0; done < n;) {
    const ssize_t w = write(1, line + done, (size_t)(n - done));
    if (w <= 0) return;
    done += (int)w;
  }
}

static void put(struct dyn_insn *out, size_t at, size_t cap, uint64_t rip, uint64_t next,
                int branch, int taken) {
  if (at >= cap) return;
  out[at].rip = rip;
  out[at].next = next;
  out[at].branch = branch;
  out[at].taken = taken;
}

size_t trace_straight(const struct insn_entry *from, const struct insn_entry *to,
                      struct dyn_insn *out, size_t at, size_t cap) {
  /* A branch's next RIP is the next table entry: every branch in these tables has one. */
  for (const struct insn_entry *e = from; e < to; ++e)
    put(out, at++, cap, e->address, e->kind != K_PLAIN ? e[1].address : 0, e->kind != K_PLAIN,
        e->kind == K_TAKEN);
  return at;
}

size_t trace_loop(const struct insn_entry *head, const struct insn_entry *end, unsigned iterations,
                  struct dyn_insn *out, size_t at, size_t cap) {
  for (unsigned i = 0; i < iterations; ++i) {
    for (const struct insn_entry *e = head; e < end; ++e) {
      if (e->kind == K_LOOP) {
        const int taken = i + 1 < iterations;
        put(out, at++, cap, e->address, taken ? head->address : end->address, 1, taken);
      } else {
        put(out, at++, cap, e->address, e->kind != K_PLAIN ? e[1].address : 0, e->kind != K_PLAIN,
            e->kind == K_TAKEN);
      }
    }
  }
  return at;
}

size_t lwp_expected(const struct dyn_insn *trace, size_t n, const unsigned (*slots)[2],
                    unsigned n_slots, uint8_t core_id, struct lwp_record *out, size_t cap) {
  unsigned counter[LWP_SLOTS];
  for (unsigned s = 0; s < n_slots; ++s) counter[s] = slots[s][1];
  size_t records = 0;
  for (size_t i = 0; i < n; ++i) {
    const struct dyn_insn *d = &trace[i];
    int waiting = -1, expired = -1;
    for (unsigned s = 0; s < n_slots; ++s) {
      const int event = slots[s][0] == LWP_EVENT_INSTRUCTIONS ||
                        (slots[s][0] == LWP_EVENT_BRANCHES && d->branch);
      if (!event) continue;
      if (counter[s] == 0) {
        if (waiting < 0) waiting = (int)s;
      } else if (--counter[s] == 0 && expired < 0) {
        expired = (int)s;
      }
    }
    const int slot = waiting >= 0 ? waiting : expired;
    if (slot < 0) continue;
    counter[slot] = slots[slot][1];
    if (records < cap) {
      struct lwp_record *r = &out[records];
      memset(r, 0, sizeof *r);
      r->event_id = (uint8_t)slots[slot][0];
      r->core_id = core_id;
      r->rip = d->rip;
      if (r->event_id == LWP_EVENT_BRANCHES) {
        r->address = d->next;
        r->flags = d->taken ? 0x8000 : 0;
      }
    }
    ++records;
  }
  return records;
}

static void print_record(const char *who, const char *tag, size_t i, const struct lwp_record *r,
                         uint64_t base) {
  if (r->event_id == LWP_EVENT_BRANCHES)
    say("%s: %s %zu: event %u core %u rip=start+%lld to=start+%lld taken %u\n", who, tag, i,
        r->event_id, r->core_id, (long long)(r->rip - base), (long long)(r->address - base),
        (r->flags >> 15) & 1u);
  else
    say("%s: %s %zu: event %u core %u rip=start+%lld\n", who, tag, i, r->event_id, r->core_id,
        (long long)(r->rip - base));
}

int lwp_compare(const char *who, const struct lwp_record *got, size_t n_got,
                const struct lwp_record *want, size_t n_want, uint64_t base, int print_all) {
  int bad = n_got != n_want;
  for (size_t i = 0; i < n_got || i < n_want; ++i) {
    const struct lwp_record *g = i < n_got ? &got[i] : NULL, *w = i < n_want ? &want[i] : NULL;
    int differs = !g || !w || g->event_id != w->event_id || g->core_id != w->core_id ||
                  g->rip != w->rip || g->data != 0 || g->reserved != 0;
    if (g && w && w->event_id == LWP_EVENT_BRANCHES)
      differs |= g->address != w->address || ((g->flags ^ w->flags) & 0x8000);
    if (g && w && w->event_id != LWP_EVENT_BRANCHES) differs |= g->address != 0 || g->flags != 0;
    bad += differs;
    if (print_all || differs || n_got != n_want) {
      if (g) print_record(who, differs ? "got (differs)" : "got", i, g, base);
      if (w && differs) print_record(who, "want", i, w, base);
    }
  }
  if (n_got != n_want) say("%s: FAIL: %zu records, expected %zu\n", who, n_got, n_want);
  return bad;
}

int apic_id_of(int cpu) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return -1;
  char line[512];
  int current = -1, id = -1;
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "processor", 9)) current = atoi(strchr(line, ':') ? strchr(line, ':') + 1 : "");
    if (current == cpu && !strncmp(line, "apicid", 6) && strchr(line, ':')) {
      id = atoi(strchr(line, ':') + 1);
      break;
    }
  }
  fclose(f);
  return id;
}

int pin_to_cpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0 ? 0 : -errno;
}
