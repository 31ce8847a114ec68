/* yield_ping [COUNT [LABEL]]: COUNT times (default 5) prints "LABEL ping i/COUNT" and yields, so
 * two copies show the kernel switching between tasks. LABEL defaults to argv[0]. */
#include "guest/lib/pmuvm.h"

int main(int argc, char **argv) {
  long count = 5;
  if (argc > 1 && (parse_long(argv[1], &count) != 0 || count < 0)) {
    print("usage: yield_ping [COUNT [LABEL]]\n");
    return 2;
  }
  const char *label = argc > 2 ? argv[2] : argv[0];
  for (long i = 1; i <= count; ++i) {
    printf_("%s ping %ld/%ld\n", label, i, count);
    if (sys_yield() != 0) {
      printf_("%s: yield returned an error\n", label);
      return 1;
    }
  }
  printf_("%s done\n", label);
  return 0;
}
