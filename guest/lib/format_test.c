/* Host unit test of the freestanding formatter against the C library's snprintf. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "guest/lib/freestanding.h"

static int passed, failed;

#define SAME(...)                                                               \
  do {                                                                          \
    char want[256], got[256];                                                   \
    snprintf(want, sizeof want, __VA_ARGS__);                                   \
    fmt_snprintf(got, sizeof got, __VA_ARGS__);                                 \
    if (strcmp(want, got) == 0) {                                               \
      ++passed;                                                                 \
    } else {                                                                    \
      ++failed;                                                                 \
      printf("line %d: want \"%s\", got \"%s\"\n", __LINE__, want, got);        \
    }                                                                           \
  } while (0)

int main(void) {
  SAME("plain");
  SAME("%d %d %d", 0, -1, 2147483647);
  SAME("%i", -2147483647 - 1);
  SAME("%u %x %X", 4000000000u, 0xdeadbeefu, 0xdeadbeefu);
  SAME("%lu %lx %ld", 18446744073709551615ul, 0x123456789abcdeful, -9223372036854775807l - 1);
  SAME("%llu %llx", 18446744073709551615ull, 0xfedcba9876543210ull);
  SAME("%zu", (size_t)12345);
  SAME("[%5d] [%-5d] [%05d] [%05x]", 42, 42, 42, 0xab);
  SAME("[%8s] [%-8s] [%s]", "ab", "ab", "");
  SAME("%c%c%c %%", 'a', 'b', 'c');
  SAME("%#x %#X %#x %#llx %#lx", 0x1f, 0xab, 0, 0x100000ull, 0ul);
  SAME("[%#06x] [%#10x] [%-#8x]", 0xab, 0xab, 0xab);
  char buf[8];
  size_t n = fmt_snprintf(buf, sizeof buf, "%s", "0123456789");
  if (n == 10 && strcmp(buf, "0123456") == 0) ++passed;
  else { ++failed; printf("truncation: n=%zu buf=\"%s\"\n", n, buf); }
  printf("format_test: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
