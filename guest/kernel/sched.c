/* Tasks and scheduling: one FIFO run queue for all CPUs under sched_lock, round-robin with a
 * time slice of one timer tick.
 *
 * There are no kernel threads and no per-task kernel stacks. A task's user state lives in the
 * trap frame while it runs and in task->frame while it does not; switching tasks means saving
 * the current frame into the task and overwriting the frame with the next task's state before
 * the trap stub restores it (entry.S). A CPU with nothing to run goes to idle_loop on its kernel
 * stack and enters the next task with enter_frame.
 *
 * Switch order (it matters for LWP, whose flush writes through the current CR3):
 *   1. save: frame -> task, then SLWPCB (RDMSR LWPMSR1, flush) and LLWPCB 0 under the old CR3;
 *   2. under sched_lock: requeue the old task (only now may another CPU pick it up), pick next;
 *   3. load: CR3, PMUVM_MSR_TASK = id, LLWPCB of its LWPCB (WRMSR LWPMSR1), frame;
 *   4. return_to_user: TF for the guest-assisted stepper, PMUVM_MSR_USER_ENTRY when needed.
 *
 * Wake-ups (lwp_wait timeout, LWP threshold interrupt) only make a WAITING task READY; a task
 * that is still being switched out (cpu != -1) is queued by the CPU switching it out. */
#include "guest/kernel/kernel.h"

spinlock_t sched_lock;
struct task tasks[MAX_TASKS];
uint32_t task_count;
volatile uint64_t jiffies;

static struct task *rq_head, *rq_tail;
static uint32_t live_tasks;
static bool any_failure;
static uint32_t first_failure;

static void rq_push(struct task *t) {
  t->next = 0;
  if (rq_tail) rq_tail->next = t;
  else rq_head = t;
  rq_tail = t;
}

static bool eligible(const struct task *t, const struct cpu *c) {
  return t->pinned_cpu < 0 || t->pinned_cpu == (int)c->index;
}

static struct task *rq_pop_for(const struct cpu *c) {
  struct task *prev = 0;
  for (struct task *t = rq_head; t; prev = t, t = t->next) {
    if (!eligible(t, c)) continue;
    if (prev) prev->next = t->next;
    else rq_head = t->next;
    if (rq_tail == t) rq_tail = prev;
    t->next = 0;
    return t;
  }
  return 0;
}

static bool rq_has_for(const struct cpu *c) {
  for (struct task *t = rq_head; t; t = t->next)
    if (eligible(t, c)) return true;
  return false;
}

void pv_wrmsr(uint32_t msr, uint64_t value, bool *enabled, const char *what) {
  if (!*enabled) return;
  if (wrmsr_safe(msr, value)) {
    *enabled = false;
    kprintf("kernel: WRMSR %s (%#x) raised #GP: the VMM does not implement it; "
            "not writing it again\n", what, msr);
  }
}

/* Called by task.c for each program, before any CPU schedules. */
void sched_start_task(struct task *t) {
  uint64_t f = spin_lock_irqsave(&sched_lock);
  t->state = TASK_READY;
  t->cpu = -1;
  ++live_tasks;
  rq_push(t);
  spin_unlock_irqrestore(&sched_lock, f);
}

void sched_task_failed_at_boot(struct task *t, uint32_t status) {
  uint64_t f = spin_lock_irqsave(&sched_lock);
  t->state = TASK_DEAD;
  t->exit_status = status;
  if (status && !any_failure) {
    any_failure = true;
    first_failure = status;
  }
  spin_unlock_irqrestore(&sched_lock, f);
}

uint32_t sched_live_tasks(void) { return __atomic_load_n(&live_tasks, __ATOMIC_SEQ_CST); }
uint32_t sched_exit_status(void) { return any_failure ? first_failure : 0; }

void sched_wake_locked(struct task *t) {
  if (t->state != TASK_WAITING) return;
  t->state = TASK_READY;
  if (t->cpu < 0) rq_push(t);
}

static void save_current(struct cpu *c, struct task *t, const struct trap_frame *f) {
  t->frame = *f;
  t->frame.rflags &= ~RFLAGS_TF;
  lwp_switch_out(c, t); /* still under t's CR3 */
}

/* Takes the next runnable task for this CPU off the run queue and makes it current (NULL: none).
 * Called with sched_lock held. */
static struct task *take_next_locked(struct cpu *c) {
  struct task *next = rq_pop_for(c);
  if (next) {
    next->state = TASK_RUNNING;
    next->cpu = (int)c->index;
  }
  c->current = next;
  return next;
}

static void load_task(struct cpu *c, struct task *t, struct trap_frame *f) {
  if (read_cr3() != t->cr3) write_cr3(t->cr3);
  pv_wrmsr(PMUVM_MSR_TASK, t->id, &kcfg.task_msr_on, "PMUVM_MSR_TASK");
  lwp_switch_in(c, t);
  *f = t->frame;
  if (t->resume_lwp_wait) {
    uint64_t fl = spin_lock_irqsave(&sched_lock);
    f->rax = t->lwp_irqs;
    t->lwp_irqs = 0;
    t->resume_lwp_wait = false;
    spin_unlock_irqrestore(&sched_lock, fl);
  }
}

/* The current task (if any) has been saved or has died: requeue it if it is still runnable,
 * pick the next task for this CPU and load it into f, or go idle. */
static void switch_to_next(struct cpu *c, struct trap_frame *f) {
  struct task *cur = c->current;
  uint64_t fl = spin_lock_irqsave(&sched_lock);
  if (cur) {
    cur->cpu = -1;
    if (cur->state == TASK_RUNNING || cur->state == TASK_READY) {
      cur->state = TASK_READY;
      rq_push(cur);
    }
  }
  struct task *next = take_next_locked(c);
  spin_unlock_irqrestore(&sched_lock, fl);
  if (!next) go_idle(c);
  load_task(c, next, f);
}

void sched_yield(struct cpu *c, struct trap_frame *f) {
  uint64_t fl = spin_lock_irqsave(&sched_lock);
  const bool other = rq_has_for(c);
  spin_unlock_irqrestore(&sched_lock, fl);
  if (!other || !c->current) return; /* alone: keep running, no LWP save/restore */
  save_current(c, c->current, f);
  switch_to_next(c, f);
}

void sched_block(struct cpu *c, struct trap_frame *f) {
  save_current(c, c->current, f);
  switch_to_next(c, f);
}

void sched_exit(struct cpu *c, struct trap_frame *f, uint32_t status) {
  struct task *t = c->current;
  if (!t) panic("cpu %u: task exit with no current task", c->index);
  lwp_task_exit(c, t);
  uint64_t fl = spin_lock_irqsave(&sched_lock);
  t->state = TASK_DEAD;
  t->exit_status = status;
  t->cpu = -1;
  --live_tasks;
  if (status && !any_failure) {
    any_failure = true;
    first_failure = status;
  }
  const bool last = live_tasks == 0;
  c->current = 0;
  spin_unlock_irqrestore(&sched_lock, fl);
  kprintf("kernel: task %u (%s) exited with status %u\n", t->id, t->name, status);
  if (last) finish(sched_exit_status());
  switch_to_next(c, f);
  /* The frame now holds the next task; leave through the trap return path directly (the caller
   * is deep inside a handler and must not continue). */
  return_to_user(c, f);
  enter_frame(f);
}

void sched_timer_tick(struct cpu *c, struct trap_frame *f) {
  ++c->ticks;
  if (c->index == 0) {
    const uint64_t now = __atomic_add_fetch(&jiffies, 1, __ATOMIC_SEQ_CST);
    uint64_t fl = spin_lock_irqsave(&sched_lock);
    for (uint32_t i = 0; i < task_count; ++i)
      if (tasks[i].state == TASK_WAITING && now >= tasks[i].wait_deadline)
        sched_wake_locked(&tasks[i]);
    spin_unlock_irqrestore(&sched_lock, fl);
  }
  if (frame_is_user(f) && c->current) sched_yield(c, f);
}

void return_to_user(struct cpu *c, struct trap_frame *f) {
  struct task *t = c->current;
  if (!t) panic("cpu %u: returning to ring 3 with no current task (rip=%#llx)", c->index,
                (unsigned long long)f->rip);
  const bool profiled = t->lwpcb != 0 || t->pmc_active;
  const bool step = guest_stepper_on && profiled;
  f->rflags = (f->rflags & RFLAGS_USER_MASK) | RFLAGS_IF | 0x2 | (step ? RFLAGS_TF : 0);
  set_user_selectors(f);
  if (kcfg.user_entry_on && (t->need_user_entry || step || (profiled && kcfg.profiled_entry_on)))
    pv_wrmsr(PMUVM_MSR_USER_ENTRY, frame_phys(f), &kcfg.user_entry_on, "PMUVM_MSR_USER_ENTRY");
  t->need_user_entry = false;
}

static void idle_loop(void) {
  struct cpu *c = this_cpu();
  for (;;) {
    cli();
    uint64_t fl = spin_lock_irqsave(&sched_lock);
    struct task *next = take_next_locked(c);
    spin_unlock_irqrestore(&sched_lock, fl);
    if (next) {
      /* The frame goes where a trap from ring 3 would have put it: at the top of the kernel
       * stack, above the IDLE_STACK_RESERVE bytes this loop never uses. */
      struct trap_frame *f = (struct trap_frame *)(uintptr_t)(
          cpu_stack_top(c->index, KSTACK_OFF, KSTACK_SIZE) - sizeof(struct trap_frame));
      load_task(c, next, f);
      return_to_user(c, f);
      enter_frame(f);
    }
    /* sti; hlt: the interrupt shadow of sti keeps a wake-up from slipping in before hlt. */
    __asm__ volatile("sti; hlt" : : : "memory");
  }
}

void go_idle(struct cpu *c) {
  c->current = 0;
  pv_wrmsr(PMUVM_MSR_TASK, 0, &kcfg.task_msr_on, "PMUVM_MSR_TASK");
  if (read_cr3() != kernel_pml4) write_cr3(kernel_pml4);
  run_on_stack(cpu_stack_top(c->index, KSTACK_OFF, KSTACK_SIZE) - IDLE_STACK_RESERVE, idle_loop);
}
