/* See perf_loop.h. */
#include "guest/linux/perf_loop.h"

#include <linux/perf_event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

_Static_assert(PERF_EVENT_IOC_ENABLE == 0x2400 && PERF_EVENT_IOC_DISABLE == 0x2401,
               "the asm below hard-codes the ioctl numbers");

extern const struct insn_entry perf_insns[], perf_loop_head[], perf_tail[], perf_insns_end[];

/* rdi = fd, rsi = n, rdx = enable_result. */
__asm__(
    ".text\n"
    ".globl perf_loop\n"
    "perf_loop:\n"
    "  mov %rdx, %r9\n"
    "  mov %rsi, %r8\n"
    "  mov $16, %eax\n"        /* SYS_ioctl */
    "  mov $0x2400, %esi\n"    /* PERF_EVENT_IOC_ENABLE */
    "  xor %edx, %edx\n"
    "  syscall\n"              /* ENABLE: not counted */
    TABLE("perf_insns")
    I("mov %rax, %r10")        /* 1 */
    TABLE("perf_loop_head")
    "2:\n"
    NOPS(6)                    /* 2 + 8i .. 7 + 8i */
    I("dec %r8")               /* 8 + 8i */
    B_LOOP("jnz 2b")           /* 9 + 8i */
    TABLE("perf_tail")
    I("mov $16, %eax")         /* 8N + 2 */
    I("mov $0x2401, %esi")     /* 8N + 3 */
    I("syscall")               /* 8N + 4: DISABLE, counted */
    TABLE("perf_insns_end")
    "  mov %r10, (%r9)\n"
    "  ret\n");

struct dyn_insn *perf_trace(uint64_t n, size_t *length) {
  const size_t total = (size_t)perf_loop_count(n);
  struct dyn_insn *trace = calloc(total, sizeof *trace);
  if (!trace) return NULL;
  size_t at = trace_straight(perf_insns, perf_loop_head, trace, 0, total);
  at = trace_loop(perf_loop_head, perf_tail, (unsigned)n, trace, at, total);
  at = trace_straight(perf_tail, perf_insns_end, trace, at, total);
  if (at != total) {
    free(trace);
    return NULL;
  }
  *length = total;
  return trace;
}

uint64_t perf_disable_syscall(void) { return perf_insns_end[-1].address; }

int perf_open_instructions(uint64_t period, unsigned precise_ip) {
  struct perf_event_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_HARDWARE;
  attr.config = PERF_COUNT_HW_INSTRUCTIONS;
  attr.sample_period = period;
  attr.sample_type = period ? PERF_SAMPLE_IP : 0;
  attr.disabled = 1;
  attr.exclude_kernel = 1;
  attr.exclude_hv = 1;
  attr.precise_ip = precise_ip;
  return (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
}
