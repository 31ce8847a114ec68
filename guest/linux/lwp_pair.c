/* lwp_pair [ROUNDS [threads]]: two processes profile themselves at the same time, each with its
 * own LWPCB, on one CPU, yielding to each other inside the profiled loop, so the kernel switches
 * the LWPCB (LWPMSR1) at every switch. With `threads`, the two are threads of one process
 * instead (one address space, so the switch between them changes no CR3: only the per-task LWPCB
 * pointer tells them apart); everything else is the same. Each child checks that its ring
 * holds exactly its own records (the trace of its own code only: the other child's instructions,
 * the kernel's and the parent's never count) and none whose RIP lies in the other child's code.
 * ROUNDS (default 1) repeats the pair.
 *
 * Child A: slots {instructions 7, branches 2}, 12 iterations of
 *    nop x3; mov $24,%eax; syscall (sched_yield); INTERLEAVE (6); dec %rbx; jnz   = 13 per pass
 * Child B: slots {instructions 11, branches 3}, 10 iterations of
 *    nop x6; mov $24,%eax; syscall; INTERLEAVE (6); dec %rbx; jnz                 = 16 per pass
 * each after `llwpcb rdi` and followed by `slwpcb rax; llwpcb rdx` (rdx = 0). The instruction
 * counts per child (A 156, B 160) are fixed; records follow from lwp_expected() over the labelled
 * tables (A: instruction records at 7, 14, ..., 154 = 22, branch records at every 2nd jnz = 6;
 * B: instruction records at 11, ..., 154 = 14, branch records at jnz 3, 6, 9 = 3).
 * No instruction is due for both slots at once (A: jnz at 13j, branch records at j even; B: jnz at
 * 16j, records at j = 3, 6, 9; neither at a multiple of the instruction interval).
 * INTERLEAVE is branch-free and always 6 instructions: xchg my id into a shared word, and add 1
 * to r9 when the word held the other child's id (the other ran since my last pass): r9 is
 * printed as "switches", the evidence that the two really alternated. The children are pinned
 * to CPU 0 and start together (both wait on a shared flag before LLWPCB).
 * Prints "lwp_pair: child A|B: exact (N records, S switches)" per child ("thread A|B" with
 * `threads`) and "lwp_pair: PASS (ROUNDS rounds)" ("PASS (ROUNDS rounds of threads)"); exit 0 only
 * when both passed every round. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "guest/linux/lwp_linux.h"

/* One LWPCB and ring per child: forked children each use their own copy of theirs, threads
 * share the address space and must not share them. */
static struct lwpcb cbs[2] __attribute__((aligned(4096)));
static struct lwp_record rings[2][64] __attribute__((aligned(4096)));
static const char *kind = "child"; /* or "thread" */

extern const struct insn_entry pair_a_pre[], pair_a_loop[], pair_a_post[], pair_a_end[];
extern const struct insn_entry pair_b_pre[], pair_b_loop[], pair_b_post[], pair_b_end[];
extern const char pair_a_code[], pair_a_code_end[], pair_b_code[], pair_b_code_end[];
/* rdi = LWPCB, rsi = shared word, rdx = 0, rcx = iterations; returns SLWPCB's result; *switches
 * gets r9 (through r8 = where to store it). */
void *pair_a(struct lwpcb *cb, volatile uint32_t *shared, void *zero, uint64_t iterations,
             uint64_t *switches);
void *pair_b(struct lwpcb *cb, volatile uint32_t *shared, void *zero, uint64_t iterations,
             uint64_t *switches);

#define INTERLEAVE(id)                                                                     \
  I("mov $" #id ", %eax") I("xchg %eax, (%rsi)") I("cmp $" #id ", %eax") I("setne %al") \
  I("movzbl %al, %eax") I("add %rax, %r9")
#define PAIR_FUNCTION(name, id, nops)                                        \
  ".globl " #name "\n" #name ":\n"                                            \
  "  push %rbx\n"                                                            \
  "  mov %rcx, %rbx\n"                                                       \
  "  xor %r9d, %r9d\n"                                                       \
  ".globl " #name "_code\n" #name "_code:\n"                                  \
  LLWPCB_RDI                                                                 \
  TABLE(#name "_pre")                                                        \
  TABLE(#name "_loop")                                                       \
  "4:\n"                                                                     \
  NOPS(nops)                                                                 \
  I("mov $24, %eax")                                                         \
  I("syscall")                                                               \
  INTERLEAVE(id)                                                             \
  I("dec %rbx")                                                              \
  B_LOOP("jnz 4b")                                                           \
  TABLE(#name "_post")                                                       \
  I(SLWPCB_RAX) /* not traced: only the loop's fall-through address */       \
  TABLE(#name "_end")                                                        \
  LLWPCB_RDX                                                                 \
  ".globl " #name "_code_end\n" #name "_code_end:\n"                          \
  "  mov %r9, (%r8)\n"                                                       \
  "  pop %rbx\n"                                                             \
  "  ret\n"

__asm__(".text\n" PAIR_FUNCTION(pair_a, 1, 3) PAIR_FUNCTION(pair_b, 2, 6));

struct child {
  char name;
  int index; /* its LWPCB and ring */
  unsigned slots[2][2];
  unsigned iterations;
  void *(*run)(struct lwpcb *, volatile uint32_t *, void *, uint64_t, uint64_t *);
  const struct insn_entry *pre, *loop, *post, *end;
  const char *code, *code_end, *other, *other_end;
};

static int child_main(const struct child *c, volatile uint32_t *shared) {
  char who[32];
  snprintf(who, sizeof who, "lwp_pair: %s %c", kind, c->name);
  struct lwpcb *const cb = &cbs[c->index];
  struct lwp_record *const ring = rings[c->index];
  if (pin_to_cpu(0) != 0) {
    say("%s: FAIL: cannot pin to CPU 0\n", who);
    return 1;
  }
  const int core = apic_id_of(0);
  struct dyn_insn trace[256];
  size_t n = trace_straight(c->pre, c->loop, trace, 0, 256);
  n = trace_loop(c->loop, c->post, c->iterations, trace, n, 256);
  struct lwp_record want[64];
  const size_t n_want = lwp_expected(trace, n, (const unsigned(*)[2])c->slots, 2,
                                     (uint8_t)core, want, 64);
  if (n > 256 || n_want > 63 || core < 0) {
    say("%s: FAIL: bad set-up (%zu insns, %zu records, core %d)\n", who, n, n_want, core);
    return 1;
  }
  memset(cb, 0, sizeof *cb);
  memset(ring, 0, sizeof rings[0]);
  cb->buffer_size = sizeof rings[0];
  cb->buffer_base = (uint64_t)(uintptr_t)ring;
  cb->events[0].interval_id = lwp_event(c->slots[0][0], c->slots[0][1]);
  cb->events[1].interval_id = lwp_event(c->slots[1][0], c->slots[1][1]);
  /* Start together: count in, then wait for the other child. */
  __atomic_add_fetch(&shared[1], 1, __ATOMIC_SEQ_CST);
  while (__atomic_load_n(&shared[1], __ATOMIC_SEQ_CST) < 2) sched_yield();
  uint64_t switches = 0;
  void *active = c->run(cb, shared, NULL, c->iterations, &switches);
  const volatile struct lwpcb *v = cb;
  int bad = 0;
  if (active != cb) {
    say("%s: FAIL: SLWPCB returned %p, not its LWPCB %p\n", who, active, (void *)cb);
    ++bad;
  }
  if (v->missed != 0) {
    say("%s: FAIL: MissedEvents %llu\n", who, (unsigned long long)v->missed);
    ++bad;
  }
  const size_t got = v->head / LWP_RECORD_SIZE;
  for (size_t i = 0; i < got && i < 64; ++i) {
    const uint64_t rip = ring[i].rip;
    if (rip >= (uint64_t)(uintptr_t)c->other && rip < (uint64_t)(uintptr_t)c->other_end) {
      say("%s: FAIL: record %zu has a RIP in the other child's code (%#llx)\n", who, i,
          (unsigned long long)rip);
      ++bad;
    } else if (rip < (uint64_t)(uintptr_t)c->code || rip >= (uint64_t)(uintptr_t)c->code_end) {
      say("%s: FAIL: record %zu has a RIP outside its own code (%#llx)\n", who, i,
          (unsigned long long)rip);
      ++bad;
    }
  }
  bad += lwp_compare(who, ring, got, want, n_want, c->pre[0].address, 0);
  if (bad) {
    say("%s: FAILED (%d differences, %zu instructions traced)\n", who, bad, n);
    return 1;
  }
  say("%s: exact (%zu records, %llu switches)\n", who, n_want, (unsigned long long)switches);
  return 0;
}

struct thread_arg {
  const struct child *child;
  volatile uint32_t *shared;
  int status;
};

static void *thread_main(void *p) {
  struct thread_arg *a = p;
  a->status = child_main(a->child, a->shared);
  return NULL;
}

/* One round as two threads of this process; 0 when both passed. */
static int thread_round(const struct child children[2], volatile uint32_t *shared) {
  struct thread_arg args[2];
  pthread_t threads[2];
  int failed = 0;
  for (int i = 0; i < 2; ++i) {
    args[i] = (struct thread_arg){&children[i], shared, 1};
    if (pthread_create(&threads[i], NULL, thread_main, &args[i]) != 0) {
      say("lwp_pair: FAIL: pthread_create\n");
      return 1;
    }
  }
  for (int i = 0; i < 2; ++i) {
    pthread_join(threads[i], NULL);
    if (args[i].status != 0) {
      say("lwp_pair: thread %c: failed\n", children[i].name);
      failed = 1;
    }
  }
  return failed;
}

int main(int argc, char **argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 1;
  const int threads = argc > 2 && strcmp(argv[2], "threads") == 0;
  if (rounds < 1 || rounds > 100 || argc > 3 || (argc > 2 && !threads)) {
    say("usage: lwp_pair [ROUNDS 1-100 [threads]]\n");
    return 2;
  }
  if (threads) kind = "thread";
  const struct child children[2] = {
      {'A', 0, {{LWP_EVENT_INSTRUCTIONS, 7}, {LWP_EVENT_BRANCHES, 2}}, 12, pair_a, pair_a_pre,
       pair_a_loop, pair_a_post, pair_a_end, pair_a_code, pair_a_code_end, pair_b_code,
       pair_b_code_end},
      {'B', 1, {{LWP_EVENT_INSTRUCTIONS, 11}, {LWP_EVENT_BRANCHES, 3}}, 10, pair_b, pair_b_pre,
       pair_b_loop, pair_b_post, pair_b_end, pair_b_code, pair_b_code_end, pair_a_code,
       pair_a_code_end},
  };
  volatile uint32_t *shared =
      mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) {
    say("lwp_pair: FAIL: mmap\n");
    return 1;
  }
  int failed = 0;
  for (int round = 0; round < rounds; ++round) {
    shared[0] = 0;
    shared[1] = 0;
    if (threads) {
      failed |= thread_round(children, shared);
      continue;
    }
    pid_t pids[2];
    for (int i = 0; i < 2; ++i) {
      pids[i] = fork();
      if (pids[i] == 0) _exit(child_main(&children[i], shared));
      if (pids[i] < 0) {
        say("lwp_pair: FAIL: fork\n");
        return 1;
      }
    }
    for (int i = 0; i < 2; ++i) {
      int status = 0;
      waitpid(pids[i], &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        say("lwp_pair: child %c: %s %d\n", children[i].name,
            WIFSIGNALED(status) ? "killed by signal" : "exited",
            WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        failed = 1;
      }
    }
  }
  say("lwp_pair: %s (%d rounds%s)\n", failed ? "FAILED" : "PASS", rounds,
      threads ? " of threads" : "");
  return failed;
}
