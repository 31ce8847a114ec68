/* rr_subject: what rr must record and replay exactly, inside the Linux guest (DESIGN §4.13):
 * dynamically linked (ld.so and glibc run first), it prints what differs from run to run — the
 * time, random bytes, the TSC (rr traps RDTSC), its pid — and then, three times, how many
 * iterations of a loop ran before an interval timer's SIGALRM arrived. rr records where each
 * signal came by its ticks (retired conditional branches, pmuvm's architectural PMU) and must
 * deliver it at the same iteration when it replays. Then a second thread counts until the main
 * thread, after a 5 ms nanosleep, tells it to stop: how far it got depends on how rr scheduled
 * the two (it preempts a thread after a number of ticks, by the PMU's overflow interrupt), and
 * the replay must schedule them alike. `rr replay -a` prints the same lines again. Exit status 0. */
#define _GNU_SOURCE
#include <pthread.h>
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

static volatile int stop;

static void *count_until_stopped(void *arg) {
  unsigned long *counted = arg;
  while (!stop) ++*counted;
  return NULL;
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
  unsigned long counted = 0;
  pthread_t thread;
  if (pthread_create(&thread, NULL, count_until_stopped, &counted) != 0) return 1;
  const struct timespec pause = {0, 5000000};
  nanosleep(&pause, NULL);
  stop = 1;
  if (pthread_join(thread, NULL) != 0) return 1;
  printf("rr_subject: thread: counted %lu before it was stopped\n", counted);
  fflush(stdout);
  return 0;
}
