/* The counted window of perf_count and perf_sample (perf_loop.c): in one asm function, a raw
 * `syscall` ioctl(fd, PERF_EVENT_IOC_ENABLE, 0), a loop of 8 instructions x N, and a raw
 * `syscall` ioctl(fd, PERF_EVENT_IOC_DISABLE, 0). With exclude_kernel the event counts CPL-3
 * instructions retired from the one after the ENABLE syscall up to and including the DISABLE
 * syscall (it retires at CPL 3 before the kernel disables the counter); the ENABLE syscall itself
 * retired before the counter was on. Instruction by instruction (k = 1, 2, ...):
 *     1            mov %rax, %r10        keep ENABLE's result
 *     per pass i = 0..N-1, k = 2 + 8i ..
 *       +0..+5     nop x 6
 *       +6         dec %r8
 *       +7         jnz (back to the first nop; falls through after pass N-1)
 *     8N+2         mov $16, %eax         SYS_ioctl
 *     8N+3         mov $0x2401, %esi     PERF_EVENT_IOC_DISABLE (rdi = fd and rdx = 0 survive the
 *                                        ENABLE syscall: Linux preserves all but rax, rcx, r11)
 *     8N+4         syscall               DISABLE
 * so the count is exactly 8N + 4. The table perf_insns (labels, lwp_linux.h) gives every static
 * instruction's address; perf_trace() expands it into the dynamic sequence. */
#ifndef PMUVM_GUEST_LINUX_PERF_LOOP_H_
#define PMUVM_GUEST_LINUX_PERF_LOOP_H_

#include <stddef.h>
#include <stdint.h>

#include "guest/linux/lwp_linux.h"

/* Runs the window on perf event `fd`; returns the DISABLE ioctl's result, *enable_result gets
 * ENABLE's. n >= 1. */
long perf_loop(int fd, uint64_t n, long *enable_result);
static inline uint64_t perf_loop_count(uint64_t n) { return 8 * n + 4; }
/* The dynamic instruction sequence of the window (8N + 4 entries), malloc'ed; NULL on failure. */
struct dyn_insn *perf_trace(uint64_t n, size_t *length);
/* perf_event_open of PERF_COUNT_HW_INSTRUCTIONS for this task on any CPU, disabled, exclude_kernel
 * and exclude_hv; sampling every `period` events with PERF_SAMPLE_IP when period != 0, at
 * `precise_ip` (2: PEBS on Intel). Returns the fd or -1 (errno). */
int perf_open_instructions(uint64_t period, unsigned precise_ip);
/* Address of the DISABLE syscall. */
uint64_t perf_disable_syscall(void);

#endif /* PMUVM_GUEST_LINUX_PERF_LOOP_H_ */
