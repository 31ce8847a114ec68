/* netburst_exact EVENT MASK RING [PERIOD]: one NetBurst counter over an instruction sequence whose
 * counts are known in advance (DESIGN.md §4.4; tests/e2e/guest_counting_test.cc checks them).
 *   EVENT  instr (instr_retired, CRU_ESCR0, IQ_COUNTER0) or branch (branch_retired, CRU_ESCR2)
 *   MASK   the ESCR event mask (instr: 1 = NBOGUSNTAG; branch: 1 MMNP, 2 MMNM, 4 MMTP, 8 MMTM)
 *   RING   usr (T0_USR), os (T0_OS) or both
 *   PERIOD with it, the counter starts at -PERIOD with OVF_PMI_T0: the kernel's PMI handler
 *          reloads -PERIOD after each overflow PMI (one PMI per PERIOD events)
 * or: netburst_exact cascade [PERIOD] (see cascade() below), netburst_exact rep (see rep()).
 * One asm block: the pmc_config syscall (enables the counter), 5 x (xor eax,eax; jnz: not taken),
 * 10 x (jmp to the next instruction: taken), 985 nops, then the pmc_read syscall. At CPL 3 that
 * is 1008 instructions after the enabling SYSCALL retired (the reading SYSCALL included: it
 * retires before the kernel reads) and 15 branches, 10 taken and 5 not taken.
 * Prints "netburst_exact: count N pmis P". */
#include "guest/lib/pmuvm.h"

#define COUNTER 12 /* IQ_COUNTER0: CRU_ESCR0 with ESCR select 4, CRU_ESCR2 with select 5 */
#define CCCR_ENABLE (1ull << 12)
#define CCCR_THREAD_ANY (3ull << 16)
#define CCCR_OVF_PMI_T0 (1ull << 26)
#define CCCR_CASCADE (1ull << 30)
#define MASK40 ((1ull << 40) - 1)

static uint64_t run_sequence(uint64_t escr_msr, uint64_t escr, uint64_t cccr, uint64_t start,
                             uint64_t read_counter) {
  register uint64_t r10 __asm__("r10") = cccr;
  register uint64_t r8 __asm__("r8") = start;
  register uint64_t r9 __asm__("r9") = read_counter;
  uint64_t rax = PMUVM_SYS_PMC_CONFIG;
  uint64_t rdi = COUNTER, rsi = escr_msr, rdx = escr;
  __asm__ volatile(
      "syscall\n\t"                                   /* pmc_config: the counter starts */
      "test %%rax, %%rax\n\t"
      "jnz 9f\n\t"                                    /* config refused: rax < 0 */
      ".rept 5\n\txor %%eax, %%eax\n\tjnz 9f\n\t.endr\n\t"
      ".rept 10\n\tjmp 1f\n1:\n\t.endr\n\t"
      ".rept 985\n\tnop\n\t.endr\n\t"
      "mov $6, %%eax\n\t"                             /* PMUVM_SYS_PMC_READ */
      "mov %%r9d, %%edi\n\t"                         /* the counter to read */
      "syscall\n"
      "9:\n\t"
      : "+a"(rax), "+D"(rdi), "+S"(rsi), "+d"(rdx), "+r"(r10), "+r"(r8)
      : "r"(r9)
      : "rcx", "r11", "memory");
  return rax;
}

/* cascade [PERIOD]: IQ_COUNTER2 (14, through CRU_ESCR1) counts instr_retired at T0_USR with
 * Cascade set and Enable clear, so it starts only when its alternate IQ_COUNTER0 (12), preset to
 * -PERIOD (default 100, no PMI) and enabled by the sequence's SYSCALL, overflows: at event PERIOD.
 * It counts from the next instruction on: 1010 - PERIOD by the reading SYSCALL. Prints
 * "netburst_exact: cascade count N alternate M" (M: counter 12, read afterwards). */
static int cascade(int argc, char **argv) {
  long period = 100;
  if (argc > 2 && (parse_long(argv[2], &period) != 0 || period <= 0 || period > 1000)) {
    print("usage: netburst_exact cascade [PERIOD 1-1000]\n");
    return 2;
  }
  const uint64_t escr = (0x02ull << 25) | (1ull << 9) | 4u; /* instr_retired NBOGUSNTAG, T0_USR */
  const long r = sys_pmc_config(14, 0x3B9, escr, CCCR_CASCADE | (4ull << 13) | CCCR_THREAD_ANY, 0);
  if (r < 0) {
    printf_("netburst_exact: pmc_config of the cascaded counter failed (%ld)\n", r);
    return 1;
  }
  const int64_t count = (int64_t)run_sequence(
      0x3B8, escr, CCCR_ENABLE | (4ull << 13) | CCCR_THREAD_ANY, (0 - (uint64_t)period) & MASK40, 14);
  if (count < 0) {
    printf_("netburst_exact: pmc_config or pmc_read failed (%lld)\n", (long long)count);
    return 1;
  }
  printf_("netburst_exact: cascade count %lld alternate %ld\n", (long long)count, sys_pmc_read(COUNTER));
  return 0;
}

/* rep: instr_retired at T0_USR over three REP string instructions of 4096 iterations each (rep
 * stosb, rep movsb, repe cmpsb over equal buffers): each retires once however many iterations it
 * runs and however often an interrupt or a TF trap stops it (DESIGN.md §4.7), so the count from
 * the enabling SYSCALL to the reading one is 16: the result's test and jnz, 3 x (three set-up
 * instructions and the REP), the two moves before the reading SYSCALL and that SYSCALL. Prints
 * "netburst_exact: rep count N". */
static uint8_t rep_a[4096], rep_b[4096];

static int rep(void) {
  const uint64_t escr = (0x02ull << 25) | (1ull << 9) | 4u; /* instr_retired NBOGUSNTAG, T0_USR */
  register uint64_t r10 __asm__("r10") = CCCR_ENABLE | (4ull << 13) | CCCR_THREAD_ANY;
  register uint64_t r8 __asm__("r8") = 0;
  register uint64_t r9 __asm__("r9") = COUNTER;
  uint64_t rax = PMUVM_SYS_PMC_CONFIG, rdi = COUNTER, rsi = 0x3B8, rdx = escr, rcx = 0;
  __asm__ volatile(
      "syscall\n\t"                    /* pmc_config: the counter starts */
      "test %%rax, %%rax\n\t"          /* 1 */
      "jnz 9f\n\t"                     /* 2 */
      "lea %[a], %%rdi\n\t"            /* 3 */
      "mov $4096, %%ecx\n\t"           /* 4 */
      "rep stosb\n\t"                  /* 5 */
      "lea %[a], %%rsi\n\t"            /* 6 */
      "lea %[b], %%rdi\n\t"            /* 7 */
      "mov $4096, %%ecx\n\t"           /* 8 */
      "rep movsb\n\t"                  /* 9 */
      "lea %[a], %%rsi\n\t"            /* 10 */
      "lea %[b], %%rdi\n\t"            /* 11 */
      "mov $4096, %%ecx\n\t"           /* 12 */
      "repe cmpsb\n\t"                 /* 13 */
      "mov $6, %%eax\n\t"              /* 14: PMUVM_SYS_PMC_READ */
      "mov %%r9d, %%edi\n\t"           /* 15 */
      "syscall\n"                       /* 16 */
      "9:\n\t"
      : "+a"(rax), "+D"(rdi), "+S"(rsi), "+d"(rdx), "+c"(rcx), "+r"(r10), "+r"(r8),
        [a] "+m"(rep_a), [b] "+m"(rep_b)
      : "r"(r9)
      : "r11", "memory");
  if ((int64_t)rax < 0) {
    printf_("netburst_exact: pmc_config or pmc_read failed (%lld)\n", (long long)rax);
    return 1;
  }
  printf_("netburst_exact: rep count %llu\n", (unsigned long long)rax);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "cascade")) return cascade(argc, argv);
  if (argc == 2 && !strcmp(argv[1], "rep")) return rep();
  long mask = 0, period = 0;
  if (argc < 4 || parse_long(argv[2], &mask) != 0 || mask < 0 || mask > 0xFFFF ||
      (argc > 4 && (parse_long(argv[4], &period) != 0 || period <= 0))) {
    print("usage: netburst_exact instr|branch MASK usr|os|both [PERIOD] | cascade [PERIOD] | rep\n");
    return 2;
  }
  uint64_t escr_msr, select, event;
  if (!strcmp(argv[1], "instr")) {
    escr_msr = 0x3B8, select = 4, event = 0x02;
  } else if (!strcmp(argv[1], "branch")) {
    escr_msr = 0x3CC, select = 5, event = 0x06;
  } else {
    print("netburst_exact: EVENT is instr or branch\n");
    return 2;
  }
  const int os = !strcmp(argv[3], "os") || !strcmp(argv[3], "both");
  const int usr = !strcmp(argv[3], "usr") || !strcmp(argv[3], "both");
  if (!os && !usr) {
    print("netburst_exact: RING is usr, os or both\n");
    return 2;
  }
  const uint64_t escr = (event << 25) | ((uint64_t)mask << 9) | (os ? 8u : 0u) | (usr ? 4u : 0u);
  const uint64_t cccr = CCCR_ENABLE | (select << 13) | CCCR_THREAD_ANY | (period ? CCCR_OVF_PMI_T0 : 0);
  const uint64_t start = period ? (0 - (uint64_t)period) & MASK40 : 0;
  const int64_t count = (int64_t)run_sequence(escr_msr, escr, cccr, start, COUNTER);
  if (count < 0) {
    printf_("netburst_exact: pmc_config or pmc_read failed (%lld)\n", (long long)count);
    return 1;
  }
  printf_("netburst_exact: count %lld pmis %ld\n", (long long)count, sys_pmc_pmis(COUNTER));
  return 0;
}
