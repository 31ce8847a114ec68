/* The syscall ABI (DESIGN.md §4.4): `syscall` with the number in RAX and arguments in RDI, RSI,
 * RDX, R10, R8; the result in RAX; every register but RAX, RCX and R11 preserved (RCX and R11
 * keep what SYSCALL put there: the return RIP and RFLAGS).
 *
 * Both kinds of host reach syscall_from_trampoline through the #UD of the trampoline's ud2
 * (entry.S): on the PVM host from CPL 3 (SYSCALL stays at CPL 3 there), on real KVM from CPL 0.
 * Either way the frame is first turned into the caller's user frame: RIP = RCX, RFLAGS = R11,
 * RSP = the caller's RSP (unchanged by SYSCALL), CS/SS = user selectors. */
#include "guest/kernel/kernel.h"

#define WRITE_MAX (64u * 1024u) /* bytes per write call; longer writes return a short count */

static int64_t sys_write(uint64_t fd, uint64_t buf, uint64_t len) {
  if (fd != 1 && fd != 2) return -E_BADF;
  if (len == 0) return 0;
  if (!user_range_ok(buf, len)) return -E_FAULT;
  if (len > WRITE_MAX) len = WRITE_MAX;
  uint64_t flags = console_lock();
  uint64_t done = 0;
  for (; done < len; ++done) {
    uint8_t b;
    if (get_user_u8(&b, buf + done)) break;
    console_putc_locked((char)b);
  }
  console_unlock(flags);
  return done ? (int64_t)done : -E_FAULT;
}

static int64_t sys_lwp_info(uint64_t buf) {
  if (!user_range_ok(buf, 16)) return -E_FAULT;
  uint32_t r[4] = {0, 0, 0, 0};
  /* CPUID at CPL 0 sees the VMM's table; at CPL 3 the PVM host would return its own values. */
  if (kcfg.max_ext_leaf >= 0x8000001Cu) cpuid(0x8000001Cu, 0, r);
  for (int i = 0; i < 4; ++i)
    if (put_user_u32(buf + 4u * (unsigned)i, r[i])) return -E_FAULT;
  return 0;
}

static uint64_t ms_to_ticks(uint64_t ms) {
  if (ms > 86400000ull) ms = 86400000ull; /* a day is plenty and keeps the product small */
  uint64_t ticks = (ms * kcfg.timer_hz + 999) / 1000;
  return ticks ? ticks : 1;
}

/* lwp_wait(timeout_ms): the number of LWP threshold interrupts this task received since the last
 * call; if there were none and timeout_ms != 0, first waits up to timeout_ms (tick granularity)
 * for one. The result is delivered when the task runs again (sched.c: load_task). */
static void sys_lwp_wait(struct cpu *c, struct trap_frame *f) {
  struct task *t = c->current;
  const uint64_t timeout = f->rdi;
  uint64_t fl = spin_lock_irqsave(&sched_lock);
  const uint64_t pending = t->lwp_irqs;
  if (pending != 0 || timeout == 0) {
    t->lwp_irqs = 0;
    spin_unlock_irqrestore(&sched_lock, fl);
    f->rax = pending;
    return;
  }
  t->state = TASK_WAITING;
  t->resume_lwp_wait = true;
  t->wait_deadline = __atomic_load_n(&jiffies, __ATOMIC_SEQ_CST) + ms_to_ticks(timeout);
  spin_unlock_irqrestore(&sched_lock, fl);
  sched_block(c, f);
}

void syscall_from_trampoline(struct cpu *c, struct trap_frame *f) {
  struct task *t = c->current;
  /* Real KVM: the #UD came from CPL 0 (on the IST stack); PVM: from CPL 3. Either way the task
   * returns with the user selectors (return_to_user sets them again). */
  set_user_selectors(f);
  f->rip = f->rcx;
  f->rflags = f->r11; /* sanitised by return_to_user */
  if (f->rip < USER_BASE || f->rip >= USER_END) {
    kprintf("kernel: task %u (%s): syscall trampoline entered with rcx=%#llx, not a user return "
            "address; exit status %u\n", t->id, t->name, (unsigned long long)f->rip, 128u + 6u);
    kill_current_task(c, f, 128u + 6u);
  }

  /* Guest-assisted stepper: SYSCALL retired here, before the kernel acts on it (a pmc_read must
   * see it counted, a pmc_config that enables a counter must not count it). Its TF trap never
   * comes (SFMASK clears TF), so report the step now: the frame is the state after it (RIP =
   * RCX). Only while the task is being stepped, i.e. its SYSCALL was preceded by a step. */
  if (guest_stepper_on && (f->r11 & RFLAGS_TF))
    pv_wrmsr(PMUVM_MSR_STEP, frame_phys(f), &guest_stepper_on, "PMUVM_MSR_STEP");
  /* The task gets R11 back as SYSCALL saved its RFLAGS, less the stepper's TF: the kernel owns TF
   * (RFLAGS_USER_MASK), and a task must not see it (DESIGN §4.7; block_fuzz stored R11 and its
   * data differed under the guest-assisted stepper). */
  f->r11 &= ~RFLAGS_TF;

  const uint64_t a0 = f->rdi, a1 = f->rsi, a2 = f->rdx, a3 = f->r10, a4 = f->r8;
  switch (f->rax) {
    case PMUVM_SYS_EXIT:
      sched_exit(c, f, (uint32_t)(a0 & 0xFF));
    case PMUVM_SYS_WRITE:
      f->rax = (uint64_t)sys_write(a0, a1, a2);
      break;
    case PMUVM_SYS_YIELD:
      f->rax = 0;
      sched_yield(c, f);
      break;
    case PMUVM_SYS_LWP_WAIT:
      sys_lwp_wait(c, f);
      break;
    case PMUVM_SYS_LWP_INFO:
      f->rax = (uint64_t)sys_lwp_info(a0);
      break;
    case PMUVM_SYS_PMC_CONFIG:
      f->rax = (uint64_t)netburst_pmc_config(c, t, a0, a1, a2, a3, a4);
      break;
    case PMUVM_SYS_PMC_READ:
      f->rax = (uint64_t)netburst_pmc_read(c, a0);
      break;
    case PMUVM_SYS_PMC_PMIS:
      f->rax = (uint64_t)netburst_pmc_pmis(c, t, a0);
      break;
    default:
      f->rax = (uint64_t)-E_NOSYS;
      break;
  }
}
