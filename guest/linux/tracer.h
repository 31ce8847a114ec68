/* A small ptrace tracer for the Linux guest's checks (ptrace_check, vdso_count): the guest's own
 * debugging (single-steps, DR0 execution breakpoints) driven the way a debugger drives it. */
#ifndef PMUVM_GUEST_LINUX_TRACER_H_
#define PMUVM_GUEST_LINUX_TRACER_H_

#include <stdint.h>
#include <sys/types.h>

/* Waits for the next stop of `pid`: its signal, or -1 when it ended (its exit status, or 128 +
 * the signal that killed it, in *exit_status). */
int tracer_next_stop(pid_t pid, int *exit_status);
/* The offset of debug register `i` in struct user (PTRACE_POKEUSER / PTRACE_PEEKUSER). */
long tracer_debugreg_offset(int i);
/* Puts an execution breakpoint on `address` (DR0, enabled locally in DR7); 0 or -1 (line said). */
int tracer_break_at(pid_t pid, uint64_t address);
/* With the stopped child's breakpoint on `from` (tracer_break_at): continues it there, clears DR7
 * and single-steps until RIP reaches `to`, at most `limit` steps. Returns the steps, or -1 with a
 * line saying why (the child is killed then). */
long tracer_step_through(pid_t pid, uint64_t from, uint64_t to, uint64_t limit, int *exit_status);
/* Lets the child run to its end; its exit status. */
int tracer_finish(pid_t pid, int exit_status_so_far);

#endif /* PMUVM_GUEST_LINUX_TRACER_H_ */
