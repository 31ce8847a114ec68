/* The user runtime of the bundled guest programs: raw syscalls (DESIGN.md §4.4), typed
 * wrappers and console output. Programs define `int main(int argc, char **argv)`; crt0.S calls
 * it and passes its return value to exit. */
#ifndef PMUVM_GUEST_LIB_PMUVM_H_
#define PMUVM_GUEST_LIB_PMUVM_H_

#include <stddef.h>
#include <stdint.h>

#include "guest/abi/pmuvm_abi.h"
#include "guest/lib/freestanding.h"

/* ---- raw syscalls: number in rax, args in rdi, rsi, rdx, r10, r8; result in rax; rcx and r11
 * are clobbered, everything else is preserved. ---- */
static inline long pmuvm_syscall0(long n) {
  long r;
  __asm__ volatile("syscall" : "=a"(r) : "a"(n) : "rcx", "r11", "memory");
  return r;
}
static inline long pmuvm_syscall1(long n, long a0) {
  long r;
  __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a0) : "rcx", "r11", "memory");
  return r;
}
static inline long pmuvm_syscall3(long n, long a0, long a1, long a2) {
  long r;
  __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a0), "S"(a1), "d"(a2) : "rcx", "r11", "memory");
  return r;
}
static inline long pmuvm_syscall5(long n, long a0, long a1, long a2, long a3, long a4) {
  long r;
  register long r10 __asm__("r10") = a3;
  register long r8 __asm__("r8") = a4;
  __asm__ volatile("syscall"
                   : "=a"(r)
                   : "a"(n), "D"(a0), "S"(a1), "d"(a2), "r"(r10), "r"(r8)
                   : "rcx", "r11", "memory");
  return r;
}

/* ---- typed wrappers ---- */
__attribute__((noreturn)) void sys_exit(int code);
static inline long sys_write(int fd, const void *buf, size_t len) {
  return pmuvm_syscall3(PMUVM_SYS_WRITE, fd, (long)buf, (long)len);
}
static inline long sys_yield(void) { return pmuvm_syscall0(PMUVM_SYS_YIELD); }
/* Threshold interrupts received since the last call; waits up to timeout_ms for one if none. */
static inline long sys_lwp_wait(unsigned long timeout_ms) {
  return pmuvm_syscall1(PMUVM_SYS_LWP_WAIT, (long)timeout_ms);
}
/* CPUID 0x8000001C as the kernel sees it (CPL 0). */
struct lwp_info {
  uint32_t eax, ebx, ecx, edx;
};
static inline long sys_lwp_info(struct lwp_info *out) {
  return pmuvm_syscall1(PMUVM_SYS_LWP_INFO, (long)out);
}
static inline long sys_pmc_config(unsigned counter, uint32_t escr_msr, uint64_t escr,
                                  uint64_t cccr, uint64_t start) {
  return pmuvm_syscall5(PMUVM_SYS_PMC_CONFIG, counter, escr_msr, (long)escr, (long)cccr,
                        (long)start);
}
static inline long sys_pmc_read(unsigned counter) {
  return pmuvm_syscall1(PMUVM_SYS_PMC_READ, counter);
}
static inline long sys_pmc_pmis(unsigned counter) {
  return pmuvm_syscall1(PMUVM_SYS_PMC_PMIS, counter);
}

/* ---- console output (fd 1 is the serial console) ---- */
long write_all(int fd, const void *buf, size_t len);
void print(const char *s);
/* printf-like (conversions of guest/lib/freestanding.h); one write per call up to 1 KiB. */
void printf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define pmuvm_printf printf_

/* Decimal parsing for arguments: returns 0 and sets *out, or -1 if `s` is not an integer. */
int parse_long(const char *s, long *out);

#endif /* PMUVM_GUEST_LIB_PMUVM_H_ */
