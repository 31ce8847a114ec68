/* lwp_ring_unmapped: the LWP ring buffer loses a page while LWP profiles into it (DESIGN §4.12:
 * the guest is untrusted; proposal §"Page faults": a record store to a page that is not present
 * is a #PF of the task, at the instruction boundary after the event, with CR2 = the record's
 * address). A two-page ring (8 KiB, 256 records) is loaded with slot 0 counting instructions
 * retired every 5; munmap then takes its second page away, and a loop runs: record 128 is the
 * first whose store goes to offset 4096, the unmapped page, so Linux must deliver SIGSEGV,
 * SEGV_MAPERR, si_addr = ring + 4096. The handler's first instruction is LLWPCB 0 (see there);
 * it then reports and exits.
 * Prints "lwp_ring_unmapped: SIGSEGV at ring + 4096, SEGV_MAPERR" and exits 0, or what differed
 * and exits 1. The VMM must stay up (the rest of the boot's programs run). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "guest/linux/lwp_linux.h"

static struct lwpcb cb __attribute__((aligned(4096)));
static uint8_t *ring;

void lwp_ring_unmapped_load(struct lwpcb *cb);
void lwp_ring_unmapped_on_segv(int sig, siginfo_t *si, void *context);
__asm__(
    ".text\n"
    ".globl lwp_ring_unmapped_load\n"
    "lwp_ring_unmapped_load:\n"
    LLWPCB_RDI
    "  ret\n"
    /* SIGSEGV enters here, and its first instruction turns LWP off. The record store that
     * faulted is owed to the next instruction retired (the proposal's "trap" choice, 5.5.6), so
     * any instruction that retired first would fault again with SIGSEGV blocked, and Linux would
     * kill the task. LLWPCB itself does not retire (it is emulated on #UD), and Linux enters a
     * signal handler with rax = 0 (arch/x86/kernel/signal.c), which makes it LLWPCB 0. */
    ".globl lwp_ring_unmapped_segv_entry\n"
    "lwp_ring_unmapped_segv_entry:\n"
    LLWPCB_RAX
    "  jmp lwp_ring_unmapped_on_segv\n");
void lwp_ring_unmapped_segv_entry(int sig, siginfo_t *si, void *context);

void lwp_ring_unmapped_on_segv(int sig, siginfo_t *si, void *context) {
  (void)sig;
  (void)context;
  const uintptr_t offset = (uintptr_t)si->si_addr - (uintptr_t)ring;
  if (offset == 4096 && si->si_code == SEGV_MAPERR) {
    say("lwp_ring_unmapped: SIGSEGV at ring + 4096, SEGV_MAPERR\n");
    _exit(0);
  }
  say("lwp_ring_unmapped: FAIL: SIGSEGV at ring + %#lx, si_code %d\n", (unsigned long)offset,
      si->si_code);
  _exit(1);
}

int main(void) {
  ring = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (ring == MAP_FAILED) {
    say("lwp_ring_unmapped: FAIL: mmap\n");
    return 1;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = lwp_ring_unmapped_segv_entry;
  sa.sa_flags = SA_SIGINFO;
  if (sigaction(SIGSEGV, &sa, NULL) != 0) {
    say("lwp_ring_unmapped: FAIL: sigaction\n");
    return 1;
  }
  memset(&cb, 0, sizeof cb);
  cb.buffer_size = 8192;
  cb.buffer_base = (uint64_t)(uintptr_t)ring;
  cb.events[0].interval_id = lwp_event(LWP_EVENT_INSTRUCTIONS, 5);
  lwp_ring_unmapped_load(&cb);
  if (munmap(ring + 4096, 4096) != 0) {
    say("lwp_ring_unmapped: FAIL: munmap\n");
    return 1;
  }
  /* Far more than the 5 x 128 instructions that fill the first page. */
  for (volatile int i = 0; i < 4000; ++i) {
  }
  say("lwp_ring_unmapped: FAIL: the loop ended without SIGSEGV\n");
  return 1;
}
