/* lwp_flood [TASKS [ADDRESSES]] (default 8 x 40960): floods the VMM's LWP report (one
 * budget of 262144 addresses for all tasks, however many tasks a guest runs: DESIGN §4.12). TASKS processes, alive at once (each keeps its own address space, CR3: a task of the
 * report), each profile themselves with one slot, instructions retired at interval 1 (a record
 * per instruction), over their own NOP sled: `llwpcb rdi; jmp *rsi` to the last ADDRESSES NOPs
 * of sled I, then sled I's `jmp` to the common end, `slwpcb rax; llwpcb rdx` (rdx = 0). Each
 * stores ADDRESSES + 2 records (the first JMP's, at one address for all; one per NOP; its sled's
 * JMP) into a 64-record ring that overflows (missed events, not a fault), each at an address of
 * its own in the task: TASKS x (ADDRESSES + 2) places for the report (327696 by default). Each
 * child tells the parent it is done and waits until all are, so none exits (and frees its CR3
 * for another) before the last has run.
 * Prints "lwp_flood: child I: N records stored" (head / 32 + missed) per child and
 * "lwp_flood: TASKS tasks x ADDRESSES addresses done"; exit 0 when every child stored
 * ADDRESSES + 2. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "guest/linux/lwp_linux.h"

#define SLEDS 8
#define SLED_NOPS 40960
#define STR_(x) #x
#define STR(x) STR_(x)
#define SLED(i)                                   \
  ".globl flood_sled_end" #i "\n"                 \
  ".rept " STR(SLED_NOPS) "\n nop\n .endr\n"      \
  "flood_sled_end" #i ":\n"                       \
  "  jmp flood_done\n"

static struct lwpcb cb __attribute__((aligned(4096)));
static struct lwp_record ring[64] __attribute__((aligned(4096)));
extern const char flood_sled_end0[], flood_sled_end1[], flood_sled_end2[], flood_sled_end3[],
    flood_sled_end4[], flood_sled_end5[], flood_sled_end6[], flood_sled_end7[];
static const char *const sled_ends[SLEDS] = {flood_sled_end0, flood_sled_end1, flood_sled_end2,
                                             flood_sled_end3, flood_sled_end4, flood_sled_end5,
                                             flood_sled_end6, flood_sled_end7};

/* rdi = LWPCB, rsi = where in a sled to start, rdx = 0; returns SLWPCB's result. */
void *lwp_flood_run(struct lwpcb *cb, const char *start, void *zero);
__asm__(
    ".text\n"
    ".globl lwp_flood_run\n"
    "lwp_flood_run:\n"
    LLWPCB_RDI
    "  jmp *%rsi\n"
    SLED(0) SLED(1) SLED(2) SLED(3) SLED(4) SLED(5) SLED(6) SLED(7)
    "flood_done:\n"
    SLWPCB_RAX
    LLWPCB_RDX
    "  ret\n");

static int child(int index, long addresses, int done_fd, int release_fd) {
  /* Written before LLWPCB: after fork() the ring's page is copy-on-write, and LWP's first store
   * would fault (a #PF the kernel resolves; the event's record is then not stored). */
  memset(&cb, 0, sizeof cb);
  memset(ring, 0, sizeof ring);
  cb.buffer_size = sizeof ring;
  cb.buffer_base = (uint64_t)(uintptr_t)ring;
  cb.events[0].interval_id = lwp_event(LWP_EVENT_INSTRUCTIONS, 1);
  void *active = lwp_flood_run(&cb, sled_ends[index] - addresses, NULL);
  const volatile struct lwpcb *v = &cb;
  const unsigned long long stored = v->head / LWP_RECORD_SIZE + v->missed;
  say("lwp_flood: child %d: %llu records stored\n", index, stored);
  char byte = 0;
  if (write(done_fd, &byte, 1) != 1 || read(release_fd, &byte, 1) < 0) return 2;
  return active == &cb && stored == (unsigned long long)addresses + 2 ? 0 : 1;
}

int main(int argc, char **argv) {
  const int tasks = argc > 1 ? atoi(argv[1]) : SLEDS;
  const long addresses = argc > 2 ? atol(argv[2]) : SLED_NOPS;
  if (tasks < 1 || tasks > SLEDS || addresses < 1 || addresses > SLED_NOPS) {
    say("lwp_flood: FAIL: 1..%d tasks of 1..%d addresses\n", SLEDS, SLED_NOPS);
    return 2;
  }
  int done[2], release[2];
  if (pipe(done) != 0 || pipe(release) != 0) return 2;
  for (int i = 0; i < tasks; ++i) {
    const pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) {
      close(done[0]);
      close(release[1]);
      _exit(child(i, addresses, done[1], release[0]));
    }
  }
  close(done[1]);
  close(release[0]);
  char byte;
  for (int i = 0; i < tasks; ++i)
    if (read(done[0], &byte, 1) != 1) return 2;
  close(release[1]); /* every child's read returns 0: they exit */
  int failed = 0;
  for (int i = 0; i < tasks; ++i) {
    int status = 0;
    if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  say("lwp_flood: %d tasks x %ld addresses done%s\n", tasks, addresses,
      failed ? " (a child failed)" : "");
  return failed ? 1 : 0;
}
