/* rr_subject: what rr must record and replay exactly, inside the Linux guest (DESIGN §4.13):
 * dynamically linked (ld.so and glibc run first), it prints what differs from run to run — the
 * time, random bytes, the TSC (rr traps RDTSC), its pid — and then, three times, how many
 * iterations of a loop ran before an interval timer's SIGALRM arrived. rr records where each
 * signal came by its ticks (retired conditional branches, pmuvm's architectural PMU) and must
 * deliver it at the same iteration when it replays; `rr replay -a` prints the same lines again.
 * Exit status 0. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/random.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

static volatile sig_atomic_t fired;

static void on_alarm(int sig) {
  (void)sig;
  fired = 1;
}

int main(void) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  uint64_t random = 0;
  if (getrandom(&random, sizeof random, 0) != sizeof random) return 1;
  printf("rr_subject: pid %d, time %lld.%09ld, random %016llx, tsc %llu\n", getpid(),
         (long long)now.tv_sec, now.tv_nsec, (unsigned long long)random,
         (unsigned long long)__rdtsc());
  struct sigaction sa = {0};
  sa.sa_handler = on_alarm;
  if (sigaction(SIGALRM, &sa, NULL) != 0) return 1;
  for (int round = 1; round <= 3; ++round) {
    fired = 0;
    const struct itimerval timer = {{0, 0}, {0, 5000 * round}}; /* 5, 10, 15 ms */
    if (setitimer(ITIMER_REAL, &timer, NULL) != 0) return 1;
    unsigned long iterations = 0, mix = 0;
    while (!fired) {
      mix ^= iterations * 2654435761u;
      if (mix & 4) mix += iterations; /* a branch that depends on the data */
      ++iterations;
    }
    printf("rr_subject: round %d: SIGALRM after %lu iterations (mix %lx)\n", round, iterations, mix);
  }
  fflush(stdout);
  return 0;
}
