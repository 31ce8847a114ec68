/* Constants shared by the kernel's C and assembly code: selectors, per-CPU stack layout, vectors
 * and the virtual memory map. Plain #defines so that .S files can include this header.
 *
 * Virtual memory map (every address space; PML4 entries 0-255 user half, 256 kernel half):
 *   0x0000_0000_0000_1000 .. 0x0000_0000_003F_FFFF  identity map of physical 4 KiB..4 MiB,
 *        supervisor-only: the kernel image (linked at 1 MiB), the VMM's GDT/boot info pages.
 *        Page 0 is not mapped (NULL dereferences in the kernel fault).
 *   0x0000_0000_0040_0000 .. USER_LIMIT              user program segments (ELF vaddrs)
 *   PMUVM_DEMAND_ZERO_VA (1 MiB, = USER_LIMIT)         demand-zero region, mapped on first touch
 *        by the #PF handler (guest/abi/pmuvm_abi.h, mm.c: mm_demand_fault)
 *   USER_STACK_TOP - USER_STACK_SIZE .. USER_STACK_TOP  user stack (RW, NX)
 *   TRAMPOLINE_VA (one page)                           syscall trampoline (user R+X, = LSTAR)
 *   PHYS_BASE + phys                                   direct map of all RAM and of 0..4 GiB
 *        (2 MiB pages, supervisor, NX; non-RAM such as the xAPIC page 0xFEE00000 uncached)
 */
#ifndef PMUVM_GUEST_KERNEL_LAYOUT_H_
#define PMUVM_GUEST_KERNEL_LAYOUT_H_

#ifdef __ASSEMBLER__
#define U64(x) x
#else
#define U64(x) x##ULL
#endif

/* GDT selectors: the same layout the VMM uses at boot (vmm/boot/guest_layout.h), which is also
 * what SYSCALL/SYSRET derive from IA32_STAR. */
#define KERNEL_CS 0x08
#define KERNEL_DS 0x10
#define USER_DS 0x1b
#define USER_CS 0x23
#define TSS_SEL 0x28

#define MAX_CPUS 16

/* Per-CPU stacks: one 64 KiB block per CPU in the kernel's .bss (cpu_stacks). The CPU a piece of
 * kernel code runs on is found from its stack pointer: (rsp - cpu_stacks) >> CPU_BLOCK_SHIFT.
 * The lowest 8 bytes of every stack hold a canary checked on each trap. */
#define CPU_BLOCK_SHIFT 16
#define CPU_BLOCK_SIZE (1 << CPU_BLOCK_SHIFT)
#define KSTACK_OFF 0x0000   /* TSS.RSP0: interrupts/exceptions from ring 3, boot, idle */
#define KSTACK_SIZE 0x4000
#define UDSTACK_OFF 0x4000  /* IST4: #UD (syscalls via the trampoline, LLWPCB/SLWPCB emulation) */
#define UDSTACK_SIZE 0x4000
#define NMISTACK_OFF 0x8000 /* IST1: NMI (NetBurst PMIs) */
#define NMISTACK_SIZE 0x2000
#define DFSTACK_OFF 0xA000  /* IST2: #DF and #MC */
#define DFSTACK_SIZE 0x2000
#define DBSTACK_OFF 0xC000  /* IST3: #DB (guest-assisted stepper) */
#define DBSTACK_SIZE 0x2000
/* 0xE000..0xFFFF of each block is unused. */

#define IST_NMI 1
#define IST_DF 2
#define IST_DB 3
#define IST_UD 4

/* Bytes at the top of the kernel stack kept free for the user trap frame: the idle loop and the
 * boot code run below them, so entering a task from idle can build its frame there. */
#define IDLE_STACK_RESERVE 512
#define TRAP_FRAME_SIZE 176
/* Offsets in struct trap_frame (kernel.h). */
#define TRAP_FRAME_VECTOR 120
#define TRAP_FRAME_ERROR 128
#define TRAP_FRAME_RIP 136
#define TRAP_FRAME_CS 144
#define TRAP_FRAME_RFLAGS 152
#define TRAP_FRAME_RSP 160
#define TRAP_FRAME_SS 168

/* PMUVM_MSR_STEP (guest/abi/pmuvm_abi.h, which is C only), for the #DB fast path in entry.S. */
#define PV_MSR_STEP 0x40000040

#define TIMER_VECTOR 0x20
#define DEFAULT_LWP_VECTOR 0xF0
#define SPURIOUS_VECTOR 0xFF

#define PAGE_SIZE 4096
#define KERNEL_IMAGE_LIMIT U64(0x400000)
#define USER_BASE U64(0x400000)
#define USER_LIMIT U64(0x00007F0000000000)
#define USER_STACK_TOP U64(0x00007FFFFFF00000)
#define USER_STACK_SIZE U64(0x10000)
#define TRAMPOLINE_VA U64(0x00007FFFFFFFE000)
#define USER_END U64(0x0000800000000000)
#define PHYS_BASE U64(0xFFFF800000000000)

#endif /* PMUVM_GUEST_KERNEL_LAYOUT_H_ */
