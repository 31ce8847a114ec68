/* A small printf-like formatter for the guest kernel's console and the user runtime. */
#include "guest/lib/freestanding.h"

static void emit_repeat(fmt_putc_fn out, void *ctx, char c, int n) {
  for (int i = 0; i < n; ++i) out(ctx, c);
}

/* Formats `v` (magnitude; `negative` adds the sign) in `base` into a field of `width`, with an
 * optional prefix ("0x") between the sign and the digits, as C's printf does. */
static void emit_number(fmt_putc_fn out, void *ctx, uint64_t v, unsigned base, int upper,
                        int negative, const char *prefix, int width, int zero_pad, int left) {
  char digits[24];
  const char *set = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  int n = 0;
  do {
    digits[n++] = set[v % base];
    v /= base;
  } while (v != 0);
  const int prefix_len = (int)strlen(prefix);
  const int len = n + (negative ? 1 : 0) + prefix_len;
  const int pad = width > len ? width - len : 0;
  if (!left && !zero_pad) emit_repeat(out, ctx, ' ', pad);
  if (negative) out(ctx, '-');
  for (const char *q = prefix; *q; ++q) out(ctx, *q);
  if (!left && zero_pad) emit_repeat(out, ctx, '0', pad);
  while (n > 0) out(ctx, digits[--n]);
  if (left) emit_repeat(out, ctx, ' ', pad);
}

void fmt_vformat(fmt_putc_fn out, void *ctx, const char *fmt, va_list ap) {
  for (const char *p = fmt; *p; ++p) {
    if (*p != '%') {
      out(ctx, *p);
      continue;
    }
    const char *start = p++;
    int zero_pad = 0, left = 0, alternate = 0, width = 0, longs = 0;
    for (;; ++p) {
      if (*p == '0') zero_pad = 1;
      else if (*p == '-') left = 1;
      else if (*p == '#') alternate = 1;
      else break;
    }
    while (*p >= '0' && *p <= '9') width = width * 10 + (*p++ - '0');
    for (;; ++p) {
      if (*p == 'l') ++longs;
      else if (*p == 'z') longs = 2;
      else break;
    }
    switch (*p) {
      case 'd':
      case 'i': {
        int64_t v = longs ? va_arg(ap, int64_t) : va_arg(ap, int);
        uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
        emit_number(out, ctx, mag, 10, 0, v < 0, "", width, zero_pad, left);
        break;
      }
      case 'u':
      case 'x':
      case 'X': {
        uint64_t v = longs ? va_arg(ap, uint64_t) : va_arg(ap, unsigned);
        const char *prefix = (alternate && v != 0 && *p != 'u') ? (*p == 'X' ? "0X" : "0x") : "";
        emit_number(out, ctx, v, *p == 'u' ? 10 : 16, *p == 'X', 0, prefix, width, zero_pad, left);
        break;
      }
      case 'p': {
        uint64_t v = (uint64_t)(uintptr_t)va_arg(ap, void *);
        emit_number(out, ctx, v, 16, 0, 0, "0x", 18, 1, 0);
        break;
      }
      case 's': {
        const char *s = va_arg(ap, const char *);
        if (!s) s = "(null)";
        int len = (int)strlen(s);
        if (!left && width > len) emit_repeat(out, ctx, ' ', width - len);
        while (*s) out(ctx, *s++);
        if (left && width > len) emit_repeat(out, ctx, ' ', width - len);
        break;
      }
      case 'c':
        out(ctx, (char)va_arg(ap, int));
        break;
      case '%':
        out(ctx, '%');
        break;
      case '\0':
        /* A lone '%' at the end: print it and stop. */
        for (const char *q = start; *q; ++q) out(ctx, *q);
        return;
      default:
        for (const char *q = start; q <= p; ++q) out(ctx, *q);
        break;
    }
  }
}

struct buffer_ctx {
  char *buf;
  size_t size;
  size_t len;
};

static void buffer_putc(void *ctx, char c) {
  struct buffer_ctx *b = ctx;
  if (b->size > 0 && b->len + 1 < b->size) b->buf[b->len] = c;
  ++b->len;
}

size_t fmt_vsnprintf(char *buf, size_t size, const char *fmt, va_list ap) {
  struct buffer_ctx b = {buf, size, 0};
  fmt_vformat(buffer_putc, &b, fmt, ap);
  if (size > 0) buf[b.len < size ? b.len : size - 1] = '\0';
  return b.len;
}

size_t fmt_snprintf(char *buf, size_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t n = fmt_vsnprintf(buf, size, fmt, ap);
  va_end(ap);
  return n;
}
