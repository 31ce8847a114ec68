/* User runtime: exit, output and argument helpers. */
#include "guest/lib/pmuvm.h"

void sys_exit(int code) {
  pmuvm_syscall1(PMUVM_SYS_EXIT, code);
  for (;;) {
  }
}

long write_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  size_t done = 0;
  while (done < len) {
    long n = sys_write(fd, p + done, len - done);
    if (n <= 0) return done ? (long)done : n;
    done += (size_t)n;
  }
  return (long)done;
}

void print(const char *s) { write_all(1, s, strlen(s)); }

struct print_buffer {
  char data[1024];
  size_t len;
};

static void buffer_putc(void *ctx, char c) {
  struct print_buffer *b = ctx;
  if (b->len == sizeof b->data) {
    write_all(1, b->data, b->len);
    b->len = 0;
  }
  b->data[b->len++] = c;
}

void printf_(const char *fmt, ...) {
  struct print_buffer b;
  b.len = 0;
  va_list ap;
  va_start(ap, fmt);
  fmt_vformat(buffer_putc, &b, fmt, ap);
  va_end(ap);
  if (b.len) write_all(1, b.data, b.len);
}

int parse_long(const char *s, long *out) {
  if (!s || !*s) return -1;
  int negative = 0;
  if (*s == '-' || *s == '+') negative = *s++ == '-';
  if (!*s) return -1;
  long v = 0;
  for (; *s; ++s) {
    if (*s < '0' || *s > '9') return -1;
    v = v * 10 + (*s - '0');
  }
  *out = negative ? -v : v;
  return 0;
}

/* The runtime's ABI version, in .data: it also keeps every program's R+W segment non-empty, so
 * the linker script's data PT_LOAD never degenerates into an empty header at address 0. */
unsigned long pmuvm_runtime_abi_version = 1;
