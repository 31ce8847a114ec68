/* spin LABEL [ROUNDS [ITERATIONS]]: ROUNDS (default 3) CPU-bound rounds of ITERATIONS (default
 * 20 000 000) additions, printing "LABEL round i" after each, and never yielding. Two copies on one
 * vCPU interleave only if the kernel preempts them on its LAPIC timer. */
#include "guest/lib/pmuvm.h"

static volatile uint64_t sink;

int main(int argc, char **argv) {
  long rounds = 3, iterations = 20000000;
  if (argc < 2 || (argc > 2 && (parse_long(argv[2], &rounds) != 0 || rounds < 0)) ||
      (argc > 3 && (parse_long(argv[3], &iterations) != 0 || iterations < 0))) {
    print("usage: spin LABEL [ROUNDS [ITERATIONS]]\n");
    return 2;
  }
  for (long round = 1; round <= rounds; ++round) {
    for (long i = 0; i < iterations; ++i) sink += (uint64_t)i;
    printf_("%s round %ld\n", argv[1], round);
  }
  return 0;
}
