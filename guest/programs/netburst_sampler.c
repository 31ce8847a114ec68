/* netburst_sampler ROUNDS PERIOD: a long NetBurst sampling run for the migration tests
 * (tests/e2e/migration_test.cc): IQ_COUNTER0 counts instr_retired at T0_USR from -PERIOD with
 * OVF_PMI_T0, so the kernel's PMI handler reloads it every PERIOD instructions, while ROUNDS rounds
 * of a data-dependent branchy loop run (a few hundred instructions each). After every 16 rounds it
 * prints the counter and the PMIs so far, so a migration in the middle of the run is checked at
 * many points, not only at the end. The same ROUNDS and PERIOD give the same lines on every run.
 * Prints "netburst_sampler: round R count C pmis P" lines and "netburst_sampler: done ...". */
#include "guest/lib/pmuvm.h"

#define COUNTER 12 /* IQ_COUNTER0, instr_retired through CRU_ESCR0 (ESCR select 4) */
#define CCCR_ENABLE (1ull << 12)
#define CCCR_THREAD_ANY (3ull << 16)
#define CCCR_OVF_PMI_T0 (1ull << 26)
#define MASK40 ((1ull << 40) - 1)

static volatile uint64_t sink;

int main(int argc, char **argv) {
  long rounds = 0, period = 0;
  if (argc != 3 || parse_long(argv[1], &rounds) != 0 || rounds <= 0 ||
      parse_long(argv[2], &period) != 0 || period <= 0 || period > 1000000) {
    print("usage: netburst_sampler ROUNDS PERIOD\n");
    return 2;
  }
  const uint64_t escr = (0x02ull << 25) | (1ull << 9) | 4u; /* instr_retired, NBOGUSNTAG, T0_USR */
  const uint64_t cccr = CCCR_ENABLE | (4ull << 13) | CCCR_THREAD_ANY | CCCR_OVF_PMI_T0;
  if (sys_pmc_config(COUNTER, 0x3B8, escr, cccr, (0 - (uint64_t)period) & MASK40) < 0) {
    print("netburst_sampler: pmc_config failed\n");
    return 1;
  }
  uint64_t lcg = 12345;
  for (long r = 1; r <= rounds; ++r) {
    for (int i = 0; i < 32; ++i) {
      lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
      if (lcg >> 63) sink += lcg;
      else sink ^= lcg >> 7;
    }
    if (r % 16 == 0)
      printf_("netburst_sampler: round %ld count %ld pmis %ld\n", r, sys_pmc_read(COUNTER),
              sys_pmc_pmis(COUNTER));
  }
  printf_("netburst_sampler: done count %ld pmis %ld\n", sys_pmc_read(COUNTER),
          sys_pmc_pmis(COUNTER));
  return 0;
}
