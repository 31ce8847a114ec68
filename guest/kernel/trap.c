/* Exceptions and interrupts: one C entry (trap_dispatch) for all 256 vectors.
 *
 * From ring 3:
 *   #UD  at TRAMPOLINE_VA      -> syscall (entry.S explains the trampoline)
 *   #UD  on an LWP instruction -> LLWPCB/SLWPCB emulation (lwp.c)
 *   #DB  with DR6.BS           -> one guest-assisted stepper report (PMUVM_MSR_STEP), iret; if
 *                                 the VMM marked the frame PMUVM_VECTOR_LWP_PAGE_FAULT, a user #PF
 *   #PF  in the demand-zero region -> mm_demand_fault maps the page, the access is retried
 *   TIMER_VECTOR               -> scheduler tick (round-robin preemption)
 *   the LWP threshold vector   -> lwp_threshold_interrupt
 *   NMI                        -> NetBurst PMI handling
 *   any other exception        -> the task ends with status 128 + vector and a console line
 * From ring 0: #GP/#PF at an instruction in the exception table resume at its fixup; the #UD of
 * the trampoline (real KVM) is a syscall; NMI/#DB as above; anything else is a kernel panic. */
#include "guest/kernel/kernel.h"


struct ex_entry {
  uint64_t insn;
  uint64_t fixup;
};
extern const struct ex_entry __start_ex_table[], __stop_ex_table[];

static const char *const exception_names[32] = {
    "divide error (#DE)", "debug (#DB)", "NMI", "breakpoint (#BP)", "overflow (#OF)",
    "bound range (#BR)", "invalid opcode (#UD)", "device not available (#NM)",
    "double fault (#DF)", "coprocessor segment overrun", "invalid TSS (#TS)",
    "segment not present (#NP)", "stack fault (#SS)", "general protection (#GP)",
    "page fault (#PF)", "reserved (15)", "x87 floating point (#MF)", "alignment check (#AC)",
    "machine check (#MC)", "SIMD floating point (#XM)", "virtualization (#VE)",
    "control protection (#CP)", "reserved (22)", "reserved (23)", "reserved (24)",
    "reserved (25)", "reserved (26)", "reserved (27)", "hypervisor injection (#HV)",
    "VMM communication (#VC)", "security (#SX)", "reserved (31)"};

static const char *vector_name(uint64_t v) {
  return v < 32 ? exception_names[v] : "interrupt";
}

uint64_t frame_phys(const struct trap_frame *f) { return kernel_virt_to_phys(f); }

static void exception(struct cpu *c, struct trap_frame *f);

static bool fixup_lookup(struct trap_frame *f) {
  for (const struct ex_entry *e = __start_ex_table; e < __stop_ex_table; ++e) {
    if (e->insn == f->rip) {
      f->rip = e->fixup;
      return true;
    }
  }
  return false;
}

static NORETURN void kernel_fault(struct cpu *c, struct trap_frame *f) {
  panic("cpu %u: kernel %s (vector %llu) at rip=%#llx err=%#llx cr2=%#llx rsp=%#llx "
        "rflags=%#llx cs=%#llx task=%u\n"
        "  rax=%#llx rbx=%#llx rcx=%#llx rdx=%#llx rsi=%#llx rdi=%#llx rbp=%#llx\n"
        "  r8=%#llx r9=%#llx r10=%#llx r11=%#llx r12=%#llx r13=%#llx r14=%#llx r15=%#llx",
        c->index, vector_name(f->vector), (unsigned long long)f->vector,
        (unsigned long long)f->rip, (unsigned long long)f->error, (unsigned long long)read_cr2(),
        (unsigned long long)f->rsp, (unsigned long long)f->rflags, (unsigned long long)f->cs,
        c->current ? c->current->id : 0, (unsigned long long)f->rax, (unsigned long long)f->rbx,
        (unsigned long long)f->rcx, (unsigned long long)f->rdx, (unsigned long long)f->rsi,
        (unsigned long long)f->rdi, (unsigned long long)f->rbp, (unsigned long long)f->r8,
        (unsigned long long)f->r9, (unsigned long long)f->r10, (unsigned long long)f->r11,
        (unsigned long long)f->r12, (unsigned long long)f->r13, (unsigned long long)f->r14,
        (unsigned long long)f->r15);
}

void kill_current_task(struct cpu *c, struct trap_frame *f, uint32_t status) {
  sched_exit(c, f, status);
}

/* An exception from ring 3 that no handler claims: the task ends with 128 + vector. */
static NORETURN void user_fault(struct cpu *c, struct trap_frame *f) {
  struct task *t = c->current;
  const uint32_t status = 128u + (uint32_t)f->vector;
  if (f->vector == 14)
    kprintf("kernel: task %u (%s): %s at rip=%#llx, fault address %#llx, error %#llx; "
            "exit status %u\n", t ? t->id : 0, t ? t->name : "?", vector_name(f->vector),
            (unsigned long long)f->rip, (unsigned long long)read_cr2(),
            (unsigned long long)f->error, status);
  else
    kprintf("kernel: task %u (%s): %s at rip=%#llx, error %#llx, rsp=%#llx; exit status %u\n",
            t ? t->id : 0, t ? t->name : "?", vector_name(f->vector), (unsigned long long)f->rip,
            (unsigned long long)f->error, (unsigned long long)f->rsp, status);
  kill_current_task(c, f, status);
}

/* LWP's #PF trap reported through a step report (guest/abi/pmuvm_abi.h): the VMM turned the
 * frame into a user #PF at the boundary after the stepped instruction, with CR2 set. */
static void lwp_page_fault(struct cpu *c, struct trap_frame *f) {
  f->vector = 14;
  exception(c, f);
}

/* #DB. Returns true when it was a stepper report (the frame goes back unchanged, TF set). */
static bool debug_exception(struct cpu *c, struct trap_frame *f) {
  const uint64_t dr6 = read_dr6();
  write_dr6(0xFFFF0FF0ull); /* clear the sticky status bits */
  const bool single_step = (dr6 & DR6_BS) != 0;
  const bool at_trampoline = f->rip == TRAMPOLINE_VA;
  if (single_step && (frame_is_user(f) || at_trampoline)) {
    /* A user instruction retired with TF set. At the trampoline it was the task's SYSCALL (the
     * single-step trap of SYSCALL is delivered at LSTAR): that counts as one retired
     * instruction (DESIGN.md §4.4), so it is reported too, and the trampoline itself runs
     * without TF (the SYSCALL path restores TF from R11 on the way back). */
    if (guest_stepper_on && c->current) {
      pv_wrmsr(PMUVM_MSR_STEP, frame_phys(f), &guest_stepper_on, "PMUVM_MSR_STEP");
      if (f->vector == PMUVM_VECTOR_LWP_PAGE_FAULT) { /* LWP's #PF trap (pmuvm_abi.h) */
        lwp_page_fault(c, f);
        return false; /* back to the task through return_to_user */
      }
      if (at_trampoline) f->rflags &= ~RFLAGS_TF;
      if (frame_is_user(f)) set_user_selectors(f);
      return guest_stepper_on;
    }
    f->rflags &= ~RFLAGS_TF; /* nobody wants these steps (any more) */
    return false;
  }
  if (!frame_is_user(f)) {
    if (single_step) {
      /* Kernel code is never stepped; a stray TF in a kernel frame is cleared. */
      kprintf("kernel: cpu %u: unexpected single-step trap at kernel rip=%#llx; TF cleared\n",
              c->index, (unsigned long long)f->rip);
      f->rflags &= ~RFLAGS_TF;
      return false;
    }
    kernel_fault(c, f);
  }
  user_fault(c, f); /* #DB from ring 3 without a single step (e.g. icebp) */
}

static void invalid_opcode(struct cpu *c, struct trap_frame *f) {
  if (f->rip == TRAMPOLINE_VA && (frame_is_user(f) || f->cs == KERNEL_CS)) {
    if (!c->current) panic("cpu %u: syscall trampoline entered with no current task", c->index);
    syscall_from_trampoline(c, f);
    return;
  }
  if (!frame_is_user(f)) kernel_fault(c, f);
  if (lwp_emulate_ud(c, f)) return;
  user_fault(c, f);
}

static void exception(struct cpu *c, struct trap_frame *f) {
  if (frame_is_user(f)) {
    if (f->vector == 14 && mm_demand_fault(c->current, read_cr2(), f->error)) return; /* retry */
    user_fault(c, f);
  }
  if ((f->vector == 13 || f->vector == 14) && fixup_lookup(f)) return;
  kernel_fault(c, f);
}

void trap_dispatch(struct trap_frame *f) {
  struct cpu *c = this_cpu();
  check_stack_canaries(c);
  const uint64_t v = f->vector;

  if (v == 2) { /* NMI: PMIs of the NetBurst counters. Never switches tasks. */
    netburst_nmi(c);
    if (frame_is_user(f)) set_user_selectors(f);
    return;
  }
  if (v == 1) {
    if (debug_exception(c, f)) return; /* a step report: no USER_ENTRY (one exit per step) */
  } else if (v == 6) {
    invalid_opcode(c, f);
  } else if (v == PMUVM_VECTOR_LWP_PAGE_FAULT) {
    lwp_page_fault(c, f); /* from debug_entry's fast path, after its step report */
  } else if (v == 8 || v == 18) {
    kernel_fault(c, f); /* #DF, #MC: never recoverable here */
  } else if (v < 32) {
    exception(c, f);
  } else if (v == TIMER_VECTOR) {
    lapic_eoi();
    sched_timer_tick(c, f);
  } else if (v == kcfg.lwp_vector) {
    lwp_threshold_interrupt(c, f);
  } else if (v == SPURIOUS_VECTOR) {
    return; /* no EOI for spurious interrupts */
  } else {
    lapic_eoi();
    kprintf("kernel: cpu %u: unexpected interrupt vector %#llx ignored\n", c->index,
            (unsigned long long)v);
  }
  if (frame_is_user(f)) return_to_user(c, f);
}
