/* Counted windows for the stepper's Linux checks (signal handlers, REP strings, the
 * guest's own single-step, breakpoints and int3 while counting is on). A window is an asm body
 * run between a counter's start and stop, in one of two modes:
 *   perf: Linux's perf_event_open instructions:u on this task (under --cpu intel-netburst, the
 *         P4 driver on the virtual NetBurst PMU). Started by a raw `syscall` ioctl ENABLE (not
 *         counted: it retires before the counter is on), stopped by 5 counted instructions:
 *           mov %r15,%rdi; mov $16,%eax; mov $0x2401,%esi; xor %edx,%edx; syscall (DISABLE)
 *   lwp:  LWP (--cpu amd-lwp), instructions retired with interval 1: one record per counted
 *         instruction. Started by LLWPCB, stopped by 1 counted instruction: SLWPCB (#UD-
 *         emulated: not counted) reads the LWPCB address, then `xor %edx,%edx` (counted: LWP is
 *         still on; its record is the window's last, at name_lwp_end + 5) and LLWPCB with 0
 *         (#UD-emulated, disables LWP).
 * So a body of B retired user instructions counts B + 5 (perf) or B + 1 records (lwp).
 * COUNTED_WINDOW(name, body) defines `uint64_t name_perf(int fd, void *arg)` and
 * `uint64_t name_lwp(struct lwpcb *cb, void *arg)`; the body gets `arg` in %r14 and may use
 * every register but r15 (the perf fd) and rsp (the wrappers keep rbx, rbp, r12-r15 for their
 * callers). Labels name_perf_body/name_perf_end and name_lwp_body/name_lwp_end mark the
 * first body instruction and the first one after it (breakpoints and single-steps use them).
 * Bodies use numeric local labels only (the body is assembled twice). */
#ifndef PMUVM_GUEST_LINUX_COUNTED_WINDOW_H_
#define PMUVM_GUEST_LINUX_COUNTED_WINDOW_H_

#include <stdint.h>

#include "guest/linux/lwp_linux.h"

#define CW_SAVE "  push %rbx\n  push %rbp\n  push %r12\n  push %r13\n  push %r14\n  push %r15\n"
#define CW_RESTORE "  pop %r15\n  pop %r14\n  pop %r13\n  pop %r12\n  pop %rbp\n  pop %rbx\n"

#define COUNTED_WINDOW(name, body)                                                   \
  __asm__(".pushsection .text\n"                                                    \
          ".globl " #name "_perf\n" #name "_perf:\n" CW_SAVE                         \
          "  mov %rsi, %r14\n  mov %rdi, %r15\n  mov $16, %eax\n"                    \
          "  mov $0x2400, %esi\n  xor %edx, %edx\n  syscall\n"                       \
          ".globl " #name "_perf_body\n" #name "_perf_body:\n" body                  \
          ".globl " #name "_perf_end\n" #name "_perf_end:\n"                         \
          "  mov %r15, %rdi\n  mov $16, %eax\n  mov $0x2401, %esi\n"                 \
          "  xor %edx, %edx\n  syscall\n" CW_RESTORE "  ret\n"                       \
          ".globl " #name "_lwp\n" #name "_lwp:\n" CW_SAVE "  mov %rsi, %r14\n"      \
          LLWPCB_RDI                                                                 \
          ".globl " #name "_lwp_body\n" #name "_lwp_body:\n" body                    \
          ".globl " #name "_lwp_end\n" #name "_lwp_end:\n" SLWPCB_RAX                \
          "  xor %edx, %edx\n" LLWPCB_RDX CW_RESTORE "  ret\n"                       \
          ".popsection\n");                                                          \
  uint64_t name##_perf(int fd, void *arg);                                           \
  uint64_t name##_lwp(struct lwpcb *cb, void *arg);                                  \
  extern const char name##_perf_body[], name##_perf_end[], name##_lwp_body[], name##_lwp_end[];

#define CW_PERF_STOP_INSTRUCTIONS 5
#define CW_LWP_STOP_INSTRUCTIONS 1
#define CW_SLWPCB_LENGTH 5 /* the lwp window's last record is at name_lwp_end + this */

/* A counter for windows, opened by mode name ("perf" or "lwp"). */
struct counter {
  int lwp;                    /* 0: perf (or none), 1: LWP */
  int none;                   /* "none": the perf variant with no counter (fd -1: the ioctls
                                 fail, the instructions are the same); for native checks */
  int fd;                     /* perf */
  struct lwpcb *cb;           /* LWP: interval-1 instructions, a ring of `capacity` records */
  struct lwp_record *ring;
  uint32_t capacity;
};
/* Mode "perf", "lwp" or "none"; 0, or -1 with a line on stdout saying why. */
int counter_open(struct counter *c, const char *mode);
/* Fresh state before a window (LWP: an empty ring). */
void counter_reset(struct counter *c);
/* What the last window counted: perf's count, or the number of LWP records (ring not wrapped,
 * no missed events; -1 with a line saying so otherwise). "none": -1. */
int64_t counter_read(struct counter *c);
/* True when `counted` is what the window should count (always, with no counter). */
static inline int counter_exact(const struct counter *c, int64_t counted, int64_t expected) {
  return c->none || counted == expected;
}
/* The i-th LWP record's RIP (lwp mode). */
uint64_t counter_record_rip(const struct counter *c, uint32_t i);

/* A window program's optional count argument argv[index]: `fallback` when it is absent, its
 * value when it lies in [lo, hi] (lo >= 1), else -1 after a line "WHAT must be LO..HI". */
long window_count_arg(int argc, char **argv, int index, long fallback, long lo, long hi,
                      const char *what);

#endif /* PMUVM_GUEST_LINUX_COUNTED_WINDOW_H_ */
