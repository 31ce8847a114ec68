/* The bundled pmuvm guest kernel: shared types and the interfaces between its files.
 * Overview and design choices: guest/README.md. Memory/stack layout: layout.h. */
#ifndef PMUVM_GUEST_KERNEL_KERNEL_H_
#define PMUVM_GUEST_KERNEL_KERNEL_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "guest/abi/pmuvm_abi.h"
#include "guest/kernel/layout.h"
#include "guest/kernel/x86.h"
#include "guest/lib/freestanding.h"

#define MAX_TASKS PMUVM_MAX_PROGRAMS
#define NORETURN __attribute__((noreturn))

/* Negative syscall results (Linux errno values). */
#define E_BADF 9
#define E_FAULT 14
#define E_INVAL 22
#define E_NOSYS 38

/* ---- trap frame -----------------------------------------------------------------------------
 * What the trap stubs (entry.S) build on the stack for every exception and interrupt: the
 * general registers in this order, then the vector and error code (0 when the CPU pushes none),
 * then the hardware frame. 176 bytes, 16-byte aligned. This is also the structure whose
 * guest-physical address the kernel passes in PMUVM_MSR_STEP and PMUVM_MSR_USER_ENTRY writes
 * (guest/README.md, "Paravirtual MSRs"). */
struct trap_frame {
  uint64_t r15, r14, r13, r12, r11, r10, r9, r8;
  uint64_t rbp, rdi, rsi, rdx, rcx, rbx, rax;
  uint64_t vector, error;
  uint64_t rip, cs, rflags, rsp, ss;
};
_Static_assert(sizeof(struct trap_frame) == TRAP_FRAME_SIZE, "trap frame layout");
_Static_assert(__builtin_offsetof(struct trap_frame, rax) == 14 * 8, "trap frame layout");
_Static_assert(__builtin_offsetof(struct trap_frame, rip) == TRAP_FRAME_RIP, "trap frame layout");
_Static_assert(__builtin_offsetof(struct trap_frame, cs) == TRAP_FRAME_CS, "trap frame layout");
_Static_assert(__builtin_offsetof(struct trap_frame, vector) == TRAP_FRAME_VECTOR, "layout");
/* The VMM reads this frame through PMUVM_MSR_STEP / PMUVM_MSR_USER_ENTRY: same layout as the ABI. */
_Static_assert(sizeof(struct trap_frame) == sizeof(struct pmuvm_trap_frame), "ABI trap frame");
_Static_assert(__builtin_offsetof(struct trap_frame, rip) ==
               __builtin_offsetof(struct pmuvm_trap_frame, rip), "ABI trap frame");
_Static_assert(__builtin_offsetof(struct trap_frame, rax) ==
               __builtin_offsetof(struct pmuvm_trap_frame, rax), "ABI trap frame");
_Static_assert(__builtin_offsetof(struct trap_frame, rsp) ==
               __builtin_offsetof(struct pmuvm_trap_frame, rsp), "ABI trap frame");
_Static_assert(__builtin_offsetof(struct trap_frame, error) == TRAP_FRAME_ERROR, "layout");
_Static_assert(__builtin_offsetof(struct trap_frame, rflags) == TRAP_FRAME_RFLAGS, "layout");
_Static_assert(__builtin_offsetof(struct trap_frame, rsp) == TRAP_FRAME_RSP, "layout");
_Static_assert(__builtin_offsetof(struct trap_frame, ss) == TRAP_FRAME_SS, "layout");
_Static_assert(PV_MSR_STEP == PMUVM_MSR_STEP, "layout.h copy of PMUVM_MSR_STEP");
_Static_assert(TRAMPOLINE_VA == PMUVM_TRAMPOLINE_VA, "layout.h copy of PMUVM_TRAMPOLINE_VA");

static inline bool frame_is_user(const struct trap_frame *f) { return (f->cs & 3) == 3; }

/* Tasks only ever run 64-bit user code with the GDT's user selectors, and every return to ring 3
 * uses them, whatever the exception frame reported: the PVM host shows CS = 0x33 at CPL 3, which
 * is not a user code selector of this GDT; SYSCALL on real KVM leaves CPL-0 selectors. The first
 * entry of every task IRETQs with these values, so they are the ones known to work. */
static inline void set_user_selectors(struct trap_frame *f) {
  f->cs = USER_CS;
  f->ss = USER_DS;
}

/* ---- per-CPU state -------------------------------------------------------------------------- */
struct tss {
  uint32_t reserved0;
  uint64_t rsp[3];
  uint64_t reserved1;
  uint64_t ist[7];
  uint64_t reserved2;
  uint16_t reserved3;
  uint16_t iomap_base;
} __attribute__((packed));
_Static_assert(sizeof(struct tss) == 104, "64-bit TSS is 104 bytes");

#define NETBURST_COUNTERS 18

struct task;

struct cpu {
  uint32_t index;         /* vCPU index (RSI at entry) */
  uint32_t apic_id;
  bool online;
  struct task *current;   /* the task whose user state is live on this CPU; NULL = idle */
  /* LWP: true while this CPU's LWPMSR1 may hold a non-zero LWPCB address. */
  bool lwp_ok;            /* LWPMSR0 was written successfully on this CPU */
  bool lwp_loaded;
  struct task *lwp_owner; /* task whose LWPCB was loaded last here (threshold interrupts) */
  uint64_t ticks;
  uint64_t lwp_interrupts;
  uint64_t spurious_nmis;
  /* NetBurst counters are per vCPU; tasks using them are pinned (netburst.c). */
  uint64_t pmc_start[NETBURST_COUNTERS];
  uint64_t pmc_pmis[NETBURST_COUNTERS];
  uint32_t pmc_pmi_mask;  /* counters whose CCCR asks for overflow PMIs */
  uint64_t gdt[7] __attribute__((aligned(16)));
  struct tss tss __attribute__((aligned(16)));
};

extern struct cpu cpus[MAX_CPUS];
extern uint8_t cpu_stacks[MAX_CPUS][CPU_BLOCK_SIZE];

/* The CPU the caller runs on, derived from the stack pointer (layout.h). */
struct cpu *this_cpu(void);
uint64_t cpu_stack_top(uint32_t cpu, uint32_t offset, uint32_t size);

/* ---- tasks ---------------------------------------------------------------------------------- */
enum task_state { TASK_UNUSED, TASK_READY, TASK_RUNNING, TASK_WAITING, TASK_DEAD };

struct task {
  uint32_t id;             /* 1-based (program index + 1); 0 means "no task" in PMUVM_MSR_TASK */
  enum task_state state;
  char name[PMUVM_MAX_NAME];
  uint64_t cr3;            /* physical address of the task's PML4 */
  struct trap_frame frame; /* user state while the task is not on a CPU */
  struct task *next;       /* run queue link */
  int cpu;                 /* CPU it is on (saving or running), -1 when none */
  int pinned_cpu;          /* -1: any CPU */
  uint64_t lwpcb;          /* LWPCB address loaded for the task (0: LWP off for it) */
  bool need_user_entry;    /* write PMUVM_MSR_USER_ENTRY before its next return to ring 3 */
  bool resume_lwp_wait;    /* blocked in lwp_wait: resumes with rax = lwp_irqs */
  uint64_t lwp_irqs;       /* threshold interrupts since the last lwp_wait */
  uint64_t wait_deadline;  /* jiffies */
  bool pmc_active;         /* configured an enabled NetBurst counter */
  uint32_t exit_status;
};

extern struct task tasks[MAX_TASKS];
extern uint32_t task_count;

/* ---- global configuration discovered at boot (main.c) ------------------------------------- */
struct kconfig {
  uint32_t vcpu_count;
  uint32_t timer_hz;
  uint64_t ram_size;
  bool pv_present;         /* CPUID 0x40000000 carries the "pmuvm" signature */
  uint32_t pv_features;    /* CPUID 0x40000001 EAX */
  uint32_t pv_lwp_vector;  /* CPUID 0x40000001 EBX (LWPMSR0[47:40] the profile asks for) */
  bool user_entry_on;      /* write PMUVM_MSR_USER_ENTRY (PMUVM_PV_USER_ENTRY) */
  bool profiled_entry_on;  /* ... at every return of a profiled task (PMUVM_PV_PROFILED_ENTRY) */
  bool task_msr_on;        /* write PMUVM_MSR_TASK */
  uint8_t lwp_vector;      /* threshold interrupt vector */
  char vendor[13];
  uint32_t family;
  uint32_t max_ext_leaf;
};
extern struct kconfig kcfg;
/* Guest-assisted stepper active (PMUVM_PV_GUEST_STEPPER advertised, PMUVM_MSR_STEP accepted).
 * A plain global because the #DB fast path in entry.S reads it. */
extern bool guest_stepper_on;
extern struct pmuvm_boot_info boot_info;
extern volatile uint64_t jiffies;

/* ---- console (console.c) -------------------------------------------------------------------- */
void serial_init(void);
void kprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t console_lock(void);
void console_unlock(uint64_t flags);
void console_putc_locked(char c);
void console_use_block_port(void); /* PMUVM_PV_CONSOLE: send whole messages through PMUVM_PORT_CONSOLE */
NORETURN void panic(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- spinlocks: xchg-based test-and-test-and-set (no cmpxchg16b, DESIGN.md §3) ------------- */
typedef struct {
  volatile uint32_t word;
} spinlock_t;
static inline void spin_lock(spinlock_t *l) {
  while (__atomic_exchange_n(&l->word, 1u, __ATOMIC_ACQUIRE) != 0)
    while (__atomic_load_n(&l->word, __ATOMIC_RELAXED) != 0) pause();
}
static inline void spin_unlock(spinlock_t *l) { __atomic_store_n(&l->word, 0u, __ATOMIC_RELEASE); }
static inline uint64_t spin_lock_irqsave(spinlock_t *l) {
  uint64_t f = read_rflags();
  cli();
  spin_lock(l);
  return f;
}
static inline void spin_unlock_irqrestore(spinlock_t *l, uint64_t f) {
  spin_unlock(l);
  if (f & RFLAGS_IF) sti();
}

/* ---- memory (mm.c) -------------------------------------------------------------------------- */
extern uint64_t phys_map_base;  /* 0 before the kernel's tables are live, then PHYS_BASE */
extern uint64_t kernel_pml4;
static inline void *phys_to_virt(uint64_t pa) { return (void *)(uintptr_t)(pa + phys_map_base); }
uint64_t kernel_virt_to_phys(const void *p);
void mm_init(void);
uint64_t phys_alloc_pages(uint64_t count); /* zeroed, contiguous, never freed */
uint64_t phys_try_alloc_pages(uint64_t count); /* the same, or 0 when RAM is exhausted */
struct task;
/* A user #PF at `addr` with `error` (the CPU's, or LWP's trap): true when it was a first touch
 * or a copy-on-write in the demand-zero region and the page is now mapped (retry the access). */
bool mm_demand_fault(struct task *t, uint64_t addr, uint64_t error);
uint64_t as_create(void);
int as_map(uint64_t pml4, uint64_t va, uint64_t pa, uint64_t flags);
bool user_range_ok(uint64_t addr, uint64_t len);

#define PTE_P (1ull << 0)
#define PTE_W (1ull << 1)
#define PTE_U (1ull << 2)
#define PTE_PWT (1ull << 3)
#define PTE_PCD (1ull << 4)
#define PTE_PS (1ull << 7)
#define PTE_NX (1ull << 63)
#define PTE_ADDR 0x000FFFFFFFFFF000ull

/* ---- CPU setup (cpu.c) ---------------------------------------------------------------------- */
void idt_init(void);
void cpu_early_traps(struct cpu *c); /* canaries + LIDT, first thing on each CPU */
void cpu_init(struct cpu *c);        /* GDT, TSS, IDT, SYSCALL MSRs */
void check_stack_canaries(struct cpu *c);

/* ---- local APIC (lapic.c) ------------------------------------------------------------------- */
#define LAPIC_ID 0x020
#define LAPIC_VERSION 0x030
#define LAPIC_TPR 0x080
#define LAPIC_EOI 0x0B0
#define LAPIC_SVR 0x0F0
#define LAPIC_ESR 0x280
#define LAPIC_LVT_TIMER 0x320
#define LAPIC_LVT_PERF 0x340
#define LAPIC_LVT_LINT0 0x350
#define LAPIC_LVT_LINT1 0x360
#define LAPIC_LVT_ERROR 0x370
#define LAPIC_TIMER_INITIAL 0x380
#define LAPIC_TIMER_CURRENT 0x390
#define LAPIC_TIMER_DIVIDE 0x3E0
#define LVT_MASKED (1u << 16)
#define LVT_PERIODIC (1u << 17)
#define LVT_DELIVERY_NMI (4u << 8)
void lapic_init(struct cpu *c);
void lapic_timer_start(void);
uint32_t lapic_read(uint32_t reg);
void lapic_write(uint32_t reg, uint32_t value);
void lapic_eoi(void);

/* ---- traps (trap.c) ------------------------------------------------------------------------- */
void trap_dispatch(struct trap_frame *f);
NORETURN void enter_frame(struct trap_frame *f);               /* entry.S */
NORETURN void run_on_stack(uint64_t top, void (*fn)(void));   /* entry.S */
extern const uint8_t trap_stubs[];                             /* entry.S: 256 x 16 bytes */
extern const uint8_t debug_entry[];                            /* entry.S: #DB, stepper fast path */
extern const uint8_t syscall_trampoline[];                     /* entry.S: one page */
NORETURN void kill_current_task(struct cpu *c, struct trap_frame *f, uint32_t status);
uint64_t frame_phys(const struct trap_frame *f);

/* ---- scheduler (sched.c) -------------------------------------------------------------------- */
extern spinlock_t sched_lock;
void tasks_init(void);
NORETURN void go_idle(struct cpu *c);
void sched_yield(struct cpu *c, struct trap_frame *f);           /* keeps running if alone */
void sched_block(struct cpu *c, struct trap_frame *f);           /* current is WAITING */
NORETURN void sched_exit(struct cpu *c, struct trap_frame *f, uint32_t status);
void sched_timer_tick(struct cpu *c, struct trap_frame *f);
void sched_wake_locked(struct task *t);                         /* sched_lock held */
void return_to_user(struct cpu *c, struct trap_frame *f);        /* TF + USER_ENTRY hook */
void sched_start_task(struct task *t);                          /* boot: READY + queued */
void sched_task_failed_at_boot(struct task *t, uint32_t status);
uint32_t sched_live_tasks(void);
uint32_t sched_exit_status(void); /* 0, or the first non-zero task exit status */
void pv_wrmsr(uint32_t msr, uint64_t value, bool *enabled, const char *what);

/* ---- syscalls (syscall.c) ------------------------------------------------------------------- */
void syscall_from_trampoline(struct cpu *c, struct trap_frame *f);

/* ---- LWP (lwp.c) ---------------------------------------------------------------------------- */
struct lwp_config {
  bool present;          /* CPUID 0x80000001 ECX[15] */
  bool enabled;          /* LWPMSR0 enables something (CPUID 0x8000001C EAX[0]) */
  uint32_t leaf[4];      /* CPUID 0x8000001C at CPL 0 */
  uint64_t msr0;         /* value written to LWPMSR0 on every CPU */
};
extern struct lwp_config lwp;
void lwp_probe(void);
void lwp_cpu_init(struct cpu *c);
bool lwp_emulate_ud(struct cpu *c, struct trap_frame *f);
void lwp_threshold_interrupt(struct cpu *c, struct trap_frame *f);
void lwp_switch_out(struct cpu *c, struct task *t);
void lwp_switch_in(struct cpu *c, struct task *t);
void lwp_task_exit(struct cpu *c, struct task *t);

/* ---- NetBurst PMU (netburst.c) -------------------------------------------------------------- */
void netburst_probe(void);
int64_t netburst_pmc_config(struct cpu *c, struct task *t, uint64_t counter, uint64_t escr_msr,
                            uint64_t escr, uint64_t cccr, uint64_t start);
int64_t netburst_pmc_read(struct cpu *c, uint64_t counter);
int64_t netburst_pmc_pmis(struct cpu *c, struct task *t, uint64_t counter);
void netburst_nmi(struct cpu *c);

/* ---- main.c --------------------------------------------------------------------------------- */
NORETURN void finish(uint32_t status);

#endif /* PMUVM_GUEST_KERNEL_KERNEL_H_ */
