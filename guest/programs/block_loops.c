/* block_loops SHAPE ITERATIONS: a loop of known shape, run ITERATIONS times while LWP counts its
 * instructions retired (a record every 1000), for block stepping (DESIGN §4.7): the bench's
 * exits per counted instruction (bench/stepper_bench) and the e2e suites' byte-identical records
 * under every stepper (tests/e2e/guest_counting_test).
 *   tight:    dec rcx; jnz          2 instructions per basic block
 *   straight: 18 register additions, dec rcx, jnz: one 20-instruction basic block
 * Prints "block_loops: SHAPE ITERATIONS iterations of N instructions, R records" and
 * "block_loops_time: the loop took T TSC ticks". The loops are 64-byte aligned: a block never
 * crosses a page. */
#include "guest/lib/lwp.h"
#include "guest/lib/pmuvm.h"

static struct lwpcb cb;

static inline uint64_t rdtsc(void) {
  uint32_t lo, hi;
  __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
  return (uint64_t)hi << 32 | lo;
}
static uint8_t ring[4096 * LWP_RECORD_SIZE / 32] __attribute__((aligned(4096)));

static void tight(long n) {
  __asm__ volatile(
      ".p2align 6\n"
      "1: dec %%rcx\n"
      "jnz 1b\n"
      : "+c"(n)
      :
      : "cc");
}

static void straight(long n) {
  uint64_t a = 0, b = 1;
  __asm__ volatile(
      ".p2align 6\n"
      "1: add %%rbx, %%rax\n add %%rax, %%rbx\n add %%rbx, %%rax\n add %%rax, %%rbx\n"
      "add %%rbx, %%rax\n add %%rax, %%rbx\n add %%rbx, %%rax\n add %%rax, %%rbx\n"
      "add %%rbx, %%rax\n add %%rax, %%rbx\n add %%rbx, %%rax\n add %%rax, %%rbx\n"
      "add %%rbx, %%rax\n add %%rax, %%rbx\n add %%rbx, %%rax\n add %%rax, %%rbx\n"
      "add %%rbx, %%rax\n add %%rax, %%rbx\n"
      "dec %%rcx\n"
      "jnz 1b\n"
      : "+c"(n), "+a"(a), "+b"(b)
      :
      : "cc");
}

int main(int argc, char **argv) {
  long n = 0;
  const int is_tight = argc == 3 && !strcmp(argv[1], "tight");
  const int is_straight = argc == 3 && !strcmp(argv[1], "straight");
  if ((!is_tight && !is_straight) || parse_long(argv[2], &n) != 0 || n < 1) {
    print("usage: block_loops tight|straight ITERATIONS\n");
    return 2;
  }
  memset(&cb, 0, sizeof cb);
  cb.buffer_size = sizeof ring;
  cb.buffer_base = (uint64_t)(uintptr_t)ring;
  cb.events[0].interval_id = lwp_event(LWP_EVENT_INSTRUCTIONS, 1000);
  llwpcb(&cb);
  const uint64_t t0 = rdtsc();
  if (is_tight) tight(n);
  else straight(n);
  const uint64_t t1 = rdtsc();
  llwpcb(0);
  const uint32_t records = cb.head / LWP_RECORD_SIZE;
  printf_("block_loops: %s %ld iterations of %d instructions, %u records\n", argv[1], n,
          is_tight ? 2 : 20, records);
  /* Its own prefix: the ticks differ from run to run (the suites compare "block_loops:" lines). */
  printf_("block_loops_time: the loop took %llu TSC ticks\n", (unsigned long long)(t1 - t0));
  return 0;
}
