/* Lightweight Profiling support (spec/lwp-proposal-2007.txt §5, DESIGN.md §4.1-4.4).
 *
 * Boot: when CPUID 0x80000001 ECX[15] is set, every CPU writes LWPMSR0 = the feature bits that
 * CPUID 0x8000001C EAX reports (EN, IRE, BRE, DME at bits 0-3, INT at 31) with the threshold
 * vector in bits 47:40. The VMM cannot change CPUID after the first KVM_RUN (DESIGN.md §3), so
 * EAX is the VMM's enable policy and the kernel enables exactly that.
 *
 * LLWPCB/SLWPCB: the host has no LWP, so the real XOP encodings raise #UD. lwp_emulate_ud decodes
 * them (lwp_decode.h: map 9, opcode 0x12, /0 LLWPCB, /1 SLWPCB, register in ModRM.rm + XOP.B,
 * operand size from XOP.W: 64-bit when W = 1, 32-bit zero-extended when W = 0) and does WRMSR/RDMSR of LWPMSR1 at CPL 0, then advances RIP by the 5 bytes (the emulated
 * instruction does not retire, DESIGN.md §4.4). LLWPCB returns the previous LWPCB address in its
 * register (§5.3; read with RDMSR LWPMSR1 before the WRMSR). A #GP from WRMSR LWPMSR1 (bad LWPCB, DESIGN.md §4.1) ends the
 * task with status 11. Before the task continues, PMUVM_MSR_USER_ENTRY tells the VMM that ring 3
 * is next, which completes the LLWPCB the VMM deferred because it ran at CPL 0 (§5.3).
 *
 * Task switches save and restore the LWP state through LWPMSR1 (sched.c): RDMSR (= SLWPCB,
 * flushes into the old LWPCB) and WRMSR 0 under the old task's CR3, WRMSR of the next task's
 * LWPCB under its CR3.
 *
 * Threshold interrupts (vector kcfg.lwp_vector) count for the task whose LWPCB this CPU loaded
 * last, and wake it from lwp_wait. */
#include "guest/kernel/kernel.h"
#include "guest/kernel/lwp_decode.h"

struct lwp_config lwp;

void lwp_probe(void) {
  uint32_t r[4];
  if (kcfg.max_ext_leaf >= 0x80000001u) {
    cpuid(0x80000001u, 0, r);
    lwp.present = (r[2] >> 15) & 1;
  }
  if (!lwp.present) {
    kprintf("kernel: lwp: not present (CPUID 0x80000001 ECX[15] clear)\n");
    return;
  }
  if (kcfg.max_ext_leaf < 0x8000001Cu) {
    kprintf("kernel: lwp: CPUID 0x80000001 ECX[15] is set but leaf 0x8000001C is missing "
            "(max extended leaf %#x); LWP stays off\n", kcfg.max_ext_leaf);
    return;
  }
  cpuid(0x8000001Cu, 0, lwp.leaf);
  const uint32_t eax = lwp.leaf[0];
  lwp.enabled = eax & 1u;
  lwp.msr0 = (eax & 0x8000000Full) | ((uint64_t)kcfg.lwp_vector << 40);
  kprintf("kernel: lwp: CPUID 0x8000001C eax=%#x ebx=%#x ecx=%#x edx=%#x; %s\n", lwp.leaf[0],
          lwp.leaf[1], lwp.leaf[2], lwp.leaf[3],
          lwp.enabled ? "enabling" : "EAX enables nothing, LWP stays off");
  if (lwp.enabled)
    kprintf("kernel: lwp: LWPMSR0 = %#llx (threshold interrupt vector %#x)\n",
            (unsigned long long)lwp.msr0, kcfg.lwp_vector);
}

/* Boot self-check of DESIGN.md §4.1 on the boot CPU, before the real LWPMSR0 write: every bit
 * CPUID 0x8000001C EDX does not offer (EDX numbers features differently: bit 1 INT, bits 2-4 the
 * events IRE/BRE/DME), every reserved bit, and INT with a vector below 16 must raise #GP. Prints
 * one line; a bit the VMM accepts is named (the end-to-end tests look for both). */
static void lwp_msr0_self_check(void) {
  const uint32_t edx = lwp.leaf[3];
  uint64_t offered = 1ull | (0xFFull << 40); /* EN and the vector field */
  if (edx & (1u << 2)) offered |= 1ull << 1;
  if (edx & (1u << 3)) offered |= 1ull << 2;
  if (edx & (1u << 4)) offered |= 1ull << 3;
  if (edx & (1u << 1)) offered |= 1ull << 31;
  unsigned tried = 0, refused = 0;
  for (unsigned bit = 0; bit < 64; ++bit) {
    if (offered & (1ull << bit)) continue;
    ++tried;
    if (wrmsr_safe(MSR_LWP_CFG, 1ull | (1ull << bit)))
      ++refused;
    else
      kprintf("kernel: lwp: LWPMSR0 accepted unsupported bit %u\n", bit);
  }
  if (offered & (1ull << 31)) {
    ++tried;
    if (wrmsr_safe(MSR_LWP_CFG, 1ull | (1ull << 31) | (0x0Full << 40)))
      ++refused;
    else
      kprintf("kernel: lwp: LWPMSR0 accepted INT with vector 0x0f\n");
  }
  kprintf("kernel: lwp: LWPMSR0 self-check: %u of %u unsupported settings raise #GP\n", refused,
          tried);
}

void lwp_cpu_init(struct cpu *c) {
  c->lwp_ok = false;
  c->lwp_loaded = false;
  if (!lwp.present || !lwp.enabled) return;
  if (c->index == 0) lwp_msr0_self_check();
  if (wrmsr_safe(MSR_LWP_CFG, lwp.msr0)) {
    kprintf("kernel: cpu %u: WRMSR LWPMSR0 = %#llx raised #GP; LWP stays off on this CPU\n",
            c->index, (unsigned long long)lwp.msr0);
    return;
  }
  c->lwp_ok = true;
}

static uint64_t *frame_gpr(struct trap_frame *f, unsigned n) {
  switch (n) {
    case 0: return &f->rax;
    case 1: return &f->rcx;
    case 2: return &f->rdx;
    case 3: return &f->rbx;
    case 4: return &f->rsp;
    case 5: return &f->rbp;
    case 6: return &f->rsi;
    case 7: return &f->rdi;
    case 8: return &f->r8;
    case 9: return &f->r9;
    case 10: return &f->r10;
    case 11: return &f->r11;
    case 12: return &f->r12;
    case 13: return &f->r13;
    case 14: return &f->r14;
    default: return &f->r15;
  }
}

static const char *const gpr_names64[16] = {"rax", "rcx", "rdx", "rbx", "rsp", "rbp",
                                            "rsi", "rdi", "r8",  "r9",  "r10", "r11",
                                            "r12", "r13", "r14", "r15"};
static const char *const gpr_names32[16] = {"eax", "ecx", "edx",  "ebx",  "esp",  "ebp",
                                            "esi", "edi", "r8d",  "r9d",  "r10d", "r11d",
                                            "r12d", "r13d", "r14d", "r15d"};

/* Returns false when the instruction at RIP is not a well-formed LLWPCB/SLWPCB or LWP is not
 * enabled on this CPU: the #UD then stands (the task ends with status 134). */
bool lwp_emulate_ud(struct cpu *c, struct trap_frame *f) {
  uint8_t b[LWP_INSN_LENGTH];
  for (unsigned i = 0; i < LWP_INSN_LENGTH; ++i)
    if (!user_range_ok(f->rip + i, 1) || get_user_u8(&b[i], f->rip + i)) return false;
  struct lwp_insn insn;
  if (!lwp_decode(b, &insn)) return false;
  const unsigned op = insn.slwpcb ? 1 : 0;
  const bool wide = insn.wide;
  const unsigned reg = insn.reg;
  struct task *t = c->current;
  if (!t) panic("cpu %u: LWP instruction from ring 3 with no current task", c->index);
  if (!c->lwp_ok) {
    kprintf("kernel: task %u (%s): %s at rip=%#llx but LWP is not enabled on cpu %u\n", t->id,
            t->name, op == 0 ? "LLWPCB" : "SLWPCB", (unsigned long long)f->rip, c->index);
    return false;
  }
  uint64_t *r = frame_gpr(f, reg);
  if (op == 0) {
    const uint64_t addr = wide ? *r : (uint32_t)*r;
    /* §5.3: LLWPCB returns the previous LWPCB address in its register. Reading LWPMSR1 first is
     * SLWPCB, whose flush of the old state LLWPCB would do anyway. */
    uint64_t previous = 0;
    if (rdmsr_safe(MSR_LWP_CBADDR, &previous)) previous = 0;
    if (wrmsr_safe(MSR_LWP_CBADDR, addr)) {
      kprintf("kernel: task %u (%s): LLWPCB %s=%#llx at rip=%#llx raised #GP (WRMSR LWPMSR1 "
              "refused the LWPCB); exit status %u\n", t->id, t->name,
              wide ? gpr_names64[reg] : gpr_names32[reg], (unsigned long long)addr,
              (unsigned long long)f->rip, PMUVM_EXIT_TASK_FAULT);
      kill_current_task(c, f, PMUVM_EXIT_TASK_FAULT);
    }
    *r = wide ? previous : (uint32_t)previous;
    t->lwpcb = addr;
    c->lwp_loaded = addr != 0;
    if (addr) c->lwp_owner = t;
  } else {
    uint64_t value;
    if (rdmsr_safe(MSR_LWP_CBADDR, &value)) {
      kprintf("kernel: task %u (%s): SLWPCB at rip=%#llx raised #GP (RDMSR LWPMSR1); "
              "exit status %u\n", t->id, t->name, (unsigned long long)f->rip,
              PMUVM_EXIT_TASK_FAULT);
      kill_current_task(c, f, PMUVM_EXIT_TASK_FAULT);
    }
    *r = wide ? value : (uint32_t)value;
    t->lwpcb = value;
    c->lwp_loaded = value != 0;
  }
  f->rip += LWP_INSN_LENGTH;
  t->need_user_entry = true;
  return true;
}

void lwp_switch_out(struct cpu *c, struct task *t) {
  if (!c->lwp_loaded) return;
  uint64_t value;
  if (rdmsr_safe(MSR_LWP_CBADDR, &value)) {
    kprintf("kernel: cpu %u: RDMSR LWPMSR1 (save of task %u) raised #GP\n", c->index, t->id);
    value = t->lwpcb;
  }
  t->lwpcb = value;
  if (wrmsr_safe(MSR_LWP_CBADDR, 0))
    kprintf("kernel: cpu %u: WRMSR LWPMSR1 = 0 (switch out of task %u) raised #GP\n", c->index,
            t->id);
  c->lwp_loaded = false;
}

void lwp_switch_in(struct cpu *c, struct task *t) {
  if (t->lwpcb == 0) return;
  if (!c->lwp_ok) {
    kprintf("kernel: task %u (%s): cannot restore LWPCB %#llx on cpu %u (LWP is off there); "
            "LWP turned off for the task\n", t->id, t->name, (unsigned long long)t->lwpcb,
            c->index);
    t->lwpcb = 0;
    return;
  }
  if (wrmsr_safe(MSR_LWP_CBADDR, t->lwpcb)) {
    kprintf("kernel: task %u (%s): restoring LWPCB %#llx raised #GP (the LWPCB changed while "
            "in use?); LWP turned off for the task\n", t->id, t->name,
            (unsigned long long)t->lwpcb);
    t->lwpcb = 0;
    return;
  }
  c->lwp_loaded = true;
  c->lwp_owner = t;
  t->need_user_entry = true; /* the VMM completes the deferred LLWPCB at the ring-3 entry */
}

void lwp_task_exit(struct cpu *c, struct task *t) {
  if (c->lwp_loaded) {
    if (wrmsr_safe(MSR_LWP_CBADDR, 0))
      kprintf("kernel: cpu %u: WRMSR LWPMSR1 = 0 (exit of task %u) raised #GP\n", c->index,
              t->id);
    c->lwp_loaded = false;
  }
  t->lwpcb = 0;
  uint64_t fl = spin_lock_irqsave(&sched_lock);
  for (uint32_t i = 0; i < MAX_CPUS; ++i)
    if (cpus[i].lwp_owner == t) cpus[i].lwp_owner = 0;
  spin_unlock_irqrestore(&sched_lock, fl);
}

void lwp_threshold_interrupt(struct cpu *c, struct trap_frame *f) {
  (void)f;
  ++c->lwp_interrupts;
  uint64_t fl = spin_lock_irqsave(&sched_lock);
  struct task *t = c->lwp_owner;
  if (t && t->state != TASK_DEAD) {
    ++t->lwp_irqs;
    sched_wake_locked(t);
  }
  spin_unlock_irqrestore(&sched_lock, fl);
  lapic_eoi();
}
