/* hello: prints its arguments and exits 0. */
#include "guest/lib/pmuvm.h"

int main(int argc, char **argv) {
  printf_("hello from %s (%d argument%s)\n", argv[0], argc, argc == 1 ? "" : "s");
  for (int i = 0; i < argc; ++i) printf_("argv[%d] = \"%s\"\n", i, argv[i]);
  return 0;
}
