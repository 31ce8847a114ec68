/* mem/str functions for freestanding guest code. Simple byte loops on purpose: the kernel's code
 * is interpreted one instruction at a time on the PVM host (DESIGN.md §3), and the compiler must
 * not turn these loops back into calls to themselves (-fno-tree-loop-distribute-patterns). */
#include "guest/lib/freestanding.h"

void *memset(void *dst, int c, size_t n) {
  unsigned char *d = dst;
  if (((uintptr_t)d & 7) == 0 && (n & 7) == 0) {
    uint64_t v = (unsigned char)c;
    v |= v << 8;
    v |= v << 16;
    v |= v << 32;
    uint64_t *q = dst;
    for (size_t i = 0; i < n / 8; ++i) q[i] = v;
    return dst;
  }
  for (size_t i = 0; i < n; ++i) d[i] = (unsigned char)c;
  return dst;
}

void *memcpy(void *dst, const void *src, size_t n) {
  if ((((uintptr_t)dst | (uintptr_t)src | n) & 7) == 0) {
    uint64_t *d = dst;
    const uint64_t *s = src;
    for (size_t i = 0; i < n / 8; ++i) d[i] = s[i];
    return dst;
  }
  unsigned char *d = dst;
  const unsigned char *s = src;
  for (size_t i = 0; i < n; ++i) d[i] = s[i];
  return dst;
}

void *memmove(void *dst, const void *src, size_t n) {
  unsigned char *d = dst;
  const unsigned char *s = src;
  if (d == s || n == 0) return dst;
  if (d < s) {
    for (size_t i = 0; i < n; ++i) d[i] = s[i];
  } else {
    for (size_t i = n; i > 0; --i) d[i - 1] = s[i - 1];
  }
  return dst;
}

int memcmp(const void *a, const void *b, size_t n) {
  const unsigned char *x = a, *y = b;
  for (size_t i = 0; i < n; ++i)
    if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
  return 0;
}

size_t strlen(const char *s) {
  size_t n = 0;
  while (s[n]) ++n;
  return n;
}

int strcmp(const char *a, const char *b) {
  while (*a && *a == *b) ++a, ++b;
  return (unsigned char)*a - (unsigned char)*b;
}
