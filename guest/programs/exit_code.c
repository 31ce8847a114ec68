/* exit_code N: exits with status N (the VMM reports N & 0xFF). Without a valid N it prints a
 * usage line and exits with 2. */
#include "guest/lib/pmuvm.h"

int main(int argc, char **argv) {
  long code;
  if (argc != 2 || parse_long(argv[1], &code) != 0) {
    print("usage: exit_code N\n");
    return 2;
  }
  printf_("exit_code: exiting with %ld\n", code);
  sys_exit((int)code);
}
