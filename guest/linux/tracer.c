/* See tracer.h. */
#include "guest/linux/tracer.h"

#include <signal.h>
#include <stddef.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>

#include "guest/linux/lwp_linux.h"

int tracer_next_stop(pid_t pid, int *exit_status) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -2;
  if (WIFEXITED(status)) {
    *exit_status = WEXITSTATUS(status);
    return -1;
  }
  if (WIFSIGNALED(status)) {
    *exit_status = 128 + WTERMSIG(status);
    return -1;
  }
  return WSTOPSIG(status);
}

long tracer_debugreg_offset(int i) { return (long)offsetof(struct user, u_debugreg[i]); }

int tracer_break_at(pid_t pid, uint64_t address) {
  if (ptrace(PTRACE_POKEUSER, pid, (void *)tracer_debugreg_offset(0), (void *)address) != 0 ||
      ptrace(PTRACE_POKEUSER, pid, (void *)tracer_debugreg_offset(7), (void *)1L) != 0) {
    say("tracer: FAIL: PTRACE_POKEUSER of DR0/DR7: %m\n");
    return -1;
  }
  return 0;
}

long tracer_step_through(pid_t pid, uint64_t from, uint64_t to, uint64_t limit, int *exit_status) {
  ptrace(PTRACE_CONT, pid, NULL, NULL);
  int sig = tracer_next_stop(pid, exit_status);
  struct user_regs_struct regs;
  ptrace(PTRACE_GETREGS, pid, NULL, &regs);
  if (sig != SIGTRAP || regs.rip != from) {
    say("tracer: FAIL: no stop at the breakpoint (signal %d, rip %#llx, want %#llx)\n", sig,
        (unsigned long long)regs.rip, (unsigned long long)from);
    kill(pid, SIGKILL);
    return -1;
  }
  ptrace(PTRACE_POKEUSER, pid, (void *)tracer_debugreg_offset(7), (void *)0L);
  long steps = 0;
  while (regs.rip != to && (uint64_t)steps <= limit) {
    ptrace(PTRACE_SINGLESTEP, pid, NULL, NULL);
    sig = tracer_next_stop(pid, exit_status);
    if (sig != SIGTRAP) break;
    ++steps;
    ptrace(PTRACE_GETREGS, pid, NULL, &regs);
  }
  return steps;
}

int tracer_finish(pid_t pid, int exit_status) {
  int sig = 0;
  ptrace(PTRACE_CONT, pid, NULL, NULL);
  while (sig >= 0) {
    sig = tracer_next_stop(pid, &exit_status);
    if (sig >= 0) ptrace(PTRACE_CONT, pid, NULL, NULL);
  }
  return exit_status;
}
