/* lwp_sigio [SESSIONS]: LWP threshold interrupts reach the owning task as SIGIO, si_code POLL_IN.
 * Rule (proposal Table 4, Threshold; bundled guest/programs/lwp_ring.c "full"/"threshold"): an
 * interrupt when a store makes the used space ((head - tail) mod size) equal the Threshold. Here
 * software never drains the ring during a session, so the used space only grows and there is
 * exactly one crossing per session, whatever else gets counted afterwards (the signal handler's
 * own instructions may or may not be counted by the VMM: nothing below depends on them).
 * Each session: fresh LWPCB, 32-record ring (1024 bytes), Threshold 96 (3 records), slot 0
 * instructions retired, interval 5; `llwpcb rdi`, 40 labelled nops, `slwpcb rax`, `llwpcb rdx`
 * (rdx = 0). Records at nops 5, 10, 15 precede the crossing and are checked exactly; the 3rd store
 * (nop 15) makes the used space 96: the crossing. More records follow (nops 20..40, plus any the
 * handler causes: at most 32 - 1 fit, the rest are MissedEvents; either way the used space never
 * equals 96 again). Flags after LLWPCB must have INT (bit 31): the kernel enabled LWPMSR0.INT.
 * The handler counts SIGIOs, keeps si_code and the interrupted RIP (ucontext). Checked per
 * session: exactly one new SIGIO, si_code POLL_IN, and the interrupted RIP inside the session's
 * nops after nop 15 (printed as the nop number it interrupted; the exact position, nop 16, is
 * reported but not required: the proposal lets the interrupt come "significantly later").
 * Default 4 sessions: prints "lwp_sigio: 4 SIGIOs for 4 crossings, si_code POLL_IN" and exits 0,
 * or what differed and exits 1. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include "guest/linux/lwp_linux.h"

static struct lwpcb cb __attribute__((aligned(4096)));
static struct lwp_record ring[32] __attribute__((aligned(4096)));
extern const struct insn_entry sigio_insns[], sigio_insns_end[];
void *lwp_sigio_run(struct lwpcb *cb, void *zero);
__asm__(
    ".text\n"
    ".globl lwp_sigio_run\n"
    "lwp_sigio_run:\n"
    "  mov %rsi, %rdx\n"
    LLWPCB_RDI
    TABLE("sigio_insns")
    NOPS(40)
    TABLE("sigio_insns_end")
    SLWPCB_RAX
    LLWPCB_RDX
    "  ret\n");

static volatile sig_atomic_t sigios, last_code, other_signals;
static volatile uint64_t last_rip;

static void on_sigio(int sig, siginfo_t *info, void *context) {
  if (sig != SIGIO) {
    other_signals = other_signals + 1;
    return;
  }
  sigios = sigios + 1;
  last_code = info->si_code;
  last_rip = (uint64_t)((ucontext_t *)context)->uc_mcontext.gregs[REG_RIP];
}

int main(int argc, char **argv) {
  const int sessions = argc > 1 ? atoi(argv[1]) : 4;
  if (sessions < 1 || sessions > 1000) {
    say("usage: lwp_sigio [SESSIONS 1-1000]\n");
    return 2;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigio;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGIO, &sa, NULL) != 0) {
    say("lwp_sigio: FAIL: sigaction\n");
    return 1;
  }
  const uint64_t base = sigio_insns[0].address;
  const unsigned n_insns = (unsigned)(sigio_insns_end - sigio_insns);
  int bad = n_insns != 40;
  for (int s = 0; s < sessions; ++s) {
    memset(&cb, 0, sizeof cb);
    memset(ring, 0, sizeof ring);
    cb.buffer_size = sizeof ring;
    cb.buffer_base = (uint64_t)(uintptr_t)ring;
    cb.threshold = 3 * LWP_RECORD_SIZE;
    cb.events[0].interval_id = lwp_event(LWP_EVENT_INSTRUCTIONS, 5);
    const int before = sigios;
    last_code = 0;
    last_rip = 0;
    void *active = lwp_sigio_run(&cb, NULL);
    const volatile struct lwpcb *v = &cb;
    const int got = sigios - before;
    unsigned at = 0; /* the nop the SIGIO interrupted, 1-based; 0 = outside the session */
    for (unsigned k = 0; k < n_insns; ++k)
      if (sigio_insns[k].address == last_rip) at = k + 1;
    say("lwp_sigio: session %d: %d SIGIO si_code %d, delivered before nop %u (nop 16 = at once), "
        "head %u missed %llu flags %#x\n",
        s + 1, got, (int)last_code, at, v->head, (unsigned long long)v->missed, v->flags);
    if (active != &cb) say("lwp_sigio: FAIL: SLWPCB returned %p, not %p\n", active, (void *)&cb);
    if (!(v->flags & LWP_INT)) say("lwp_sigio: FAIL: LWPCB Flags without INT (%#x)\n", v->flags);
    if (got != 1) say("lwp_sigio: FAIL: %d SIGIOs in session %d, expected 1\n", got, s + 1);
    if (got >= 1 && last_code != POLL_IN)
      say("lwp_sigio: FAIL: si_code %d, expected POLL_IN (%d)\n", (int)last_code, POLL_IN);
    if (got >= 1 && at <= 15) say("lwp_sigio: FAIL: SIGIO not delivered after the crossing (nop 15)\n");
    bad += active != &cb || !(v->flags & LWP_INT) || got != 1 ||
           (got >= 1 && (last_code != POLL_IN || at <= 15));
    /* The three records before the crossing: nops 5, 10, 15. */
    static const unsigned want_nop[3] = {5, 10, 15};
    for (unsigned i = 0; i < 3; ++i) {
      if (ring[i].event_id != LWP_EVENT_INSTRUCTIONS || ring[i].rip != sigio_insns[want_nop[i] - 1].address) {
        say("lwp_sigio: FAIL: record %u: event %u rip=start+%lld, expected nop %u (start+%u)\n", i,
            ring[i].event_id, (long long)(ring[i].rip - base), want_nop[i], want_nop[i] - 1);
        ++bad;
      }
    }
    if (v->head < 3 * LWP_RECORD_SIZE) {
      say("lwp_sigio: FAIL: head %u: fewer than 3 records\n", v->head);
      ++bad;
    }
  }
  if (other_signals) ++bad;
  if (bad) {
    say("lwp_sigio: FAILED (%d SIGIOs for %d crossings)\n", (int)sigios, sessions);
    return 1;
  }
  say("lwp_sigio: %d SIGIOs for %d crossings, si_code POLL_IN\n", (int)sigios, sessions);
  return 0;
}
