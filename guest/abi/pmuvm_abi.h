/* The contract between pmuvm (the VMM, C++) and its bundled guest kernel (freestanding C).
 * Plain C, fixed-width fields, little-endian, no padding surprises: both sides include it.
 *
 * Boot: the boot vCPU starts in 64-bit mode at the kernel's ELF entry with
 *   RDI = guest-physical address of struct pmuvm_boot_info (PMUVM_BOOT_INFO_ADDR),
 *   CR3 = an identity map of the first min(RAM, 4 GiB) (2 MiB pages, supervisor-only),
 *   GDT at 0x1000 with selectors 0x08 kernel code, 0x10 kernel data, 0x1b user data,
 *   0x23 user code, 0x28 TSS; interrupts disabled; RSP = 0 (the kernel sets its own stack).
 * Secondary vCPUs start the same way at the same entry with RDI = the boot info and
 *   RSI = their vCPU index (1..vcpu_count-1); the boot vCPU has RSI = 0.
 *
 * User programs: the VMM parses each ELF program and copies every PT_LOAD segment into guest
 * RAM at a page-aligned physical address (segment.paddr, with the in-page offset of vaddr kept),
 * zero-filled up to memsz. The kernel maps each segment's pages at vaddr for its task.
 */
#ifndef PMUVM_GUEST_ABI_PMUVM_ABI_H_
#define PMUVM_GUEST_ABI_PMUVM_ABI_H_

#include <stdint.h>

#define PMUVM_BOOT_INFO_ADDR 0x3000ull
#define PMUVM_BOOT_MAGIC 0x31544f4f424d56ull /* "VMBOOT1" */
#define PMUVM_BOOT_VERSION 1u

#define PMUVM_MAX_PROGRAMS 16
#define PMUVM_MAX_SEGMENTS 8
#define PMUVM_MAX_NAME 32

/* Segment flags (ELF p_flags). */
#define PMUVM_SEG_X 1u
#define PMUVM_SEG_W 2u
#define PMUVM_SEG_R 4u

struct pmuvm_segment {
  uint64_t vaddr;  /* first byte, as in the ELF file */
  uint64_t paddr;  /* guest-physical address of that byte (same offset within its page) */
  uint64_t memsz;  /* bytes; memory past the file contents is already zero */
  uint32_t flags;  /* PMUVM_SEG_* */
  uint32_t reserved;
};

struct pmuvm_program {
  char name[PMUVM_MAX_NAME];  /* file name, NUL-terminated (truncated) */
  uint64_t entry;
  uint32_t segment_count;
  uint32_t argc;              /* argv[0] is the program name */
  uint64_t args_paddr;        /* argc NUL-terminated strings, back to back */
  uint64_t args_size;         /* bytes at args_paddr */
  struct pmuvm_segment segments[PMUVM_MAX_SEGMENTS];
};

/* boot_info.timer_hz: no periodic tick. Tasks switch only when they yield, wait or exit;
 * lwp_wait timeouts never expire. Makes CPL-0 work independent of wall-clock time. */
#define PMUVM_TIMER_OFF 0xFFFFFFFFu

struct pmuvm_boot_info {
  uint64_t magic;             /* PMUVM_BOOT_MAGIC */
  uint32_t version;           /* PMUVM_BOOT_VERSION */
  uint32_t vcpu_count;
  uint64_t ram_size;          /* bytes of guest RAM from physical 0, below the 3 GiB MMIO hole */
  uint64_t free_phys_start;   /* first physical byte the VMM did not use (page aligned) */
  uint32_t program_count;
  uint32_t pv_features;       /* PMUVM_PV_* the VMM offers (also in CPUID 0x40000001 EAX) */
  uint32_t timer_hz;          /* scheduler tick the kernel should program (LAPIC timer), or
                                 PMUVM_TIMER_OFF */
  uint32_t reserved;
  struct pmuvm_program programs[PMUVM_MAX_PROGRAMS];
};

/* I/O ports the VMM implements besides COM1 (0x3F8-0x3FF). */
#define PMUVM_PORT_EXIT 0x510    /* outl: the guest is done; the value is the VM's exit status */
#define PMUVM_EXIT_PANIC 3u      /* status a kernel panic reports (DESIGN §4.6: VMM failure) */
#define PMUVM_EXIT_TASK_FAULT 11u /* a task whose LLWPCB emulation faulted (DESIGN §4.4) */
/* outl (with PMUVM_PV_CONSOLE): the guest-physical address, below 4 GiB, of a struct
 * pmuvm_console_block whose bytes are console output, exactly as if they had been written to
 * COM1's THR one by one - one VM exit for a line instead of two per byte. A block that is not
 * wholly in RAM or says more than PMUVM_CONSOLE_BLOCK_BYTES is dropped. */
#define PMUVM_PORT_CONSOLE 0x514
#define PMUVM_CONSOLE_BLOCK_BYTES 256u
struct pmuvm_console_block {
  uint32_t length; /* bytes used of `bytes` */
  uint8_t bytes[PMUVM_CONSOLE_BLOCK_BYTES];
};

/* Paravirtual CPUID leaves (DESIGN §4.7): 0x40000000 EAX = max leaf, EBX/ECX/EDX = signature. */
#define PMUVM_CPUID_SIGNATURE_LEAF 0x40000000u
#define PMUVM_CPUID_FEATURES_LEAF 0x40000001u /* EAX = PMUVM_PV_* */
#define PMUVM_PV_GUEST_STEPPER (1u << 0) /* the kernel should single-step profiled tasks with TF */
#define PMUVM_PV_USER_ENTRY (1u << 1)    /* the kernel reports returns to ring 3 (deferred LLWPCB) */
#define PMUVM_PV_PROFILED_ENTRY (1u << 2) /* the VMM steps with KVM: report every return to ring 3 of
                                           * a task with an LWPCB or a NetBurst counter, so the VMM
                                           * can step user code without stepping the kernel */
#define PMUVM_PV_CONSOLE (1u << 3)        /* PMUVM_PORT_CONSOLE takes console output in blocks */

/* Paravirtual MSRs (DESIGN §4.7): 0x40000040-0x4000004F, in the 0x40000000 range Intel reserves
 * for hypervisor software (0x4B564Dxx is KVM's own: kvm-clock, async PF). */
#define PMUVM_MSR_FIRST 0x40000040u
#define PMUVM_MSR_COUNT 0x10u
#define PMUVM_MSR_STEP 0x40000040u       /* wrmsr from the #DB handler: a user-mode step retired;
                                          * value = guest-physical address of the struct
                                          * pmuvm_trap_frame holding the state after it */
#define PMUVM_MSR_USER_ENTRY 0x40000041u /* wrmsr: about to return to ring 3 on this vCPU;
                                          * value = guest-physical address of the struct
                                          * pmuvm_trap_frame that iretq will restore */
#define PMUVM_MSR_TASK 0x40000042u       /* wrmsr: the task now running on this vCPU (id) */

/* LWP's #PF trap under the guest-assisted stepper (DESIGN §4.1, §4.7). A record store of the
 * instruction a PMUVM_MSR_STEP report retires may fault (ring-buffer page not present or
 * read-only). The fault belongs to the user task, at the boundary after that instruction, which
 * is the state the reported frame holds; injecting #PF into the #DB handler would be wrong. So
 * before the WRMSR completes, the VMM rewrites the reported frame: vector = this value and
 * error = the #PF error code (U|W, +P), and sets CR2 to the faulting address. The kernel checks
 * the frame's vector after the WRMSR and, when it finds this value, handles the frame as a user
 * #PF (vector 14) before returning to the task. Only frames of a #DB single-step report (vector 1,
 * user CS, not at PMUVM_TRAMPOLINE_VA) are marked; a #PF raised by a SYSCALL (the syscall path's
 * report, whose next boundary is in the kernel) is not delivered — LWP's state is unchanged by
 * the trap, so the next occurrence of the event raises it again. */
#define PMUVM_VECTOR_LWP_PAGE_FAULT 0x10Eull

/* The kernel's syscall trampoline page (LSTAR), mapped user-executable in every task. Code there is
 * the kernel's, never the program's: the VMM's steppers do not count it (DESIGN §4.7). */
#define PMUVM_TRAMPOLINE_VA 0x00007FFFFFFFE000ull
#define PMUVM_TRAMPOLINE_SIZE 0x1000ull

/* The kernel's trap frame as the PV MSRs above report it (guest/kernel/kernel.h asserts that its
 * struct trap_frame has exactly this layout): general registers as pushed by the entry code, the
 * vector and error code, then the hardware interrupt frame. */
struct pmuvm_trap_frame {
  uint64_t r15, r14, r13, r12, r11, r10, r9, r8;
  uint64_t rbp, rdi, rsi, rdx, rcx, rbx, rax;
  uint64_t vector, error;
  uint64_t rip, cs, rflags, rsp, ss;
};

/* The demand-zero region every task has (DESIGN §4.4; guest/kernel/mm.c): nothing is mapped
 * there at start; the kernel's #PF handler maps a page on first touch, like a real OS's anonymous
 * memory. A user read of an absent page maps the kernel's shared zero page read-only; a user
 * write (the task's own, or an LWP record store's #PF trap) maps a fresh zeroed page writable, or
 * replaces the read-only zero page with one (copy-on-write). Each such fault prints one console
 * line "kernel: task N (NAME): demand-zero page 0x...: ... (error 0x...)". Programs use it for
 * LWP ring buffers that are not present at LLWPCB (guest/programs/lwp_fault.c). */
#define PMUVM_DEMAND_ZERO_VA 0x00007F0000000000ull
#define PMUVM_DEMAND_ZERO_SIZE 0x100000ull /* 1 MiB */

/* Syscall numbers (DESIGN §4.4). */
#define PMUVM_SYS_EXIT 0
#define PMUVM_SYS_WRITE 1
#define PMUVM_SYS_YIELD 2
#define PMUVM_SYS_LWP_WAIT 3
#define PMUVM_SYS_LWP_INFO 4
#define PMUVM_SYS_PMC_CONFIG 5
#define PMUVM_SYS_PMC_READ 6
#define PMUVM_SYS_PMC_PMIS 7

#endif /* PMUVM_GUEST_ABI_PMUVM_ABI_H_ */
