/* Freestanding helpers shared by the bundled guest kernel and the guest user runtime:
 * the mem and str functions the compiler may call implicitly, and a small printf-like formatter.
 * Plain C, general registers only (see guest/lib/flags.bzl). */
#ifndef PMUVM_GUEST_LIB_FREESTANDING_H_
#define PMUVM_GUEST_LIB_FREESTANDING_H_

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

void *memset(void *dst, int c, size_t n);
void *memcpy(void *dst, const void *src, size_t n);
void *memmove(void *dst, const void *src, size_t n);
int memcmp(const void *a, const void *b, size_t n);
size_t strlen(const char *s);
int strcmp(const char *a, const char *b);

/* Formatter. Conversions: %d %i %u %x %X %p %s %c %%, with the flags '0', '-' and '#' (0x prefix
 * for non-zero %x/%X, as in C), a decimal width, and the length modifiers l, ll, z. %p prints
 * 0x followed by 16 hex digits. Unknown conversions are printed literally. */
typedef void (*fmt_putc_fn)(void *ctx, char c);
void fmt_vformat(fmt_putc_fn out, void *ctx, const char *fmt, va_list ap);

/* snprintf-like: always NUL-terminates when size > 0; returns the length it would have had. */
size_t fmt_snprintf(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
size_t fmt_vsnprintf(char *buf, size_t size, const char *fmt, va_list ap);

#endif /* PMUVM_GUEST_LIB_FREESTANDING_H_ */
