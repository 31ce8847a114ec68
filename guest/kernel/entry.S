/* Kernel entry points: the boot entry for every vCPU, the 256 trap stubs with the common
 * save/restore path, the helpers that leave a C context for good, and the syscall trampoline.
 *
 * Everything here runs at CPL 0 under KVM's instruction emulator on the PVM host (DESIGN.md §3)
 * except the trampoline, which may run at CPL 3 (see below). General registers only. */
#include "guest/kernel/layout.h"

        .code64

/* The general-register part of struct trap_frame (kernel.h), pushed and popped in one order. */
.macro PUSH_GPRS
        push %rax
        push %rbx
        push %rcx
        push %rdx
        push %rsi
        push %rdi
        push %rbp
        push %r8
        push %r9
        push %r10
        push %r11
        push %r12
        push %r13
        push %r14
        push %r15
.endm
.macro POP_GPRS
        pop %r15
        pop %r14
        pop %r13
        pop %r12
        pop %r11
        pop %r10
        pop %r9
        pop %r8
        pop %rbp
        pop %rdi
        pop %rsi
        pop %rdx
        pop %rcx
        pop %rbx
        pop %rax
.endm


/* ---- boot entry ------------------------------------------------------------------------------
 * All vCPUs start here in 64-bit mode with interrupts off, RSP = 0, RDI = boot information,
 * RSI = vCPU index (guest/abi/pmuvm_abi.h). Each takes the kernel stack of its index in
 * cpu_stacks (.bss, which the VMM zero-fills: the kernel never clears .bss itself because the
 * secondary vCPUs run concurrently with the boot vCPU) and calls kmain(boot_info, index). */
        .section .text.boot, "ax"
        .globl _start
        .type _start, @function
_start:
        cli
        cld
        cmp $MAX_CPUS, %rsi
        jae .Ltoo_many_cpus
        mov %rsi, %rax
        shl $CPU_BLOCK_SHIFT, %rax
        lea cpu_stacks(%rip), %rsp
        add %rax, %rsp
        add $(KSTACK_OFF + KSTACK_SIZE - IDLE_STACK_RESERVE), %rsp
        xor %ebp, %ebp
        call kmain
.Lhalt:
        cli
        hlt
        jmp .Lhalt
/* No stack for this vCPU: say so on COM1 with plain port writes, then halt. */
.Ltoo_many_cpus:
        lea .Ltoo_many_msg(%rip), %rbx
        mov $0x3f8, %edx
1:      movzbl (%rbx), %eax
        test %al, %al
        jz .Lhalt
        out %al, %dx
        inc %rbx
        jmp 1b
        .size _start, . - _start

        .section .rodata
.Ltoo_many_msg:
        .asciz "kernel: a vCPU with index >= 16 (MAX_CPUS) started; it stays halted\n"

/* ---- trap stubs ------------------------------------------------------------------------------
 * Stub n (at trap_stubs + 16 * n) pushes a zero error code unless the CPU pushed one, pushes n,
 * and joins trap_common, which saves the general registers (struct trap_frame in kernel.h),
 * calls trap_dispatch(frame) and restores from the same frame: a task switch is the C code
 * overwriting the frame with another task's saved user state.
 *
 * Returns: to ring 3 with IRETQ. To ring 0 (an interrupt that woke the idle loop, an exception
 * fixup) without IRETQ where possible: KVM's instruction emulator, which runs all CPL-0 code on
 * the PVM host, implements IRET only for real mode, and only IRETQ to ring 3 is known to work
 * there (DESIGN.md §3). kernel_return restores the registers, switches to the interrupted stack
 * and does POPFQ; RET with RFLAGS and RIP written just below the interrupted RSP (kernel code has
 * no red zone, so nothing lives there). IRETQ stays for NMIs (it ends NMI blocking) and for
 * CPL-0 frames whose stack is not a kernel stack (real KVM's #DB on the trampoline, where RSP is
 * still the user's). */
        .text
        .balign 16
        .globl trap_stubs
        .type trap_stubs, @function
trap_stubs:
        .set vec, 0
        .rept 256
        .org trap_stubs + 16 * vec      /* errors out ("backwards") if a stub exceeds 16 bytes */
        .if vec == 8 || vec == 10 || vec == 11 || vec == 12 || vec == 13 || vec == 14 || vec == 17 || vec == 21 || vec == 29 || vec == 30
        pushq $vec
        .else
        pushq $0
        pushq $vec
        .endif
        jmp trap_common
        .set vec, vec + 1
        .endr
        .org trap_stubs + 16 * 256
        .size trap_stubs, . - trap_stubs

        .type trap_common, @function
trap_common:
        PUSH_GPRS
trap_common_saved:              /* the frame is complete (debug_entry joins here) */
        cld
        mov %rsp, %rdi
        mov %rsp, %rbx
        and $-16, %rsp
        call trap_dispatch
        mov %rbx, %rsp
        testb $3, TRAP_FRAME_CS(%rsp)
        jnz trap_return                 /* to ring 3 */
        cmpq $2, TRAP_FRAME_VECTOR(%rsp)
        je trap_return                  /* NMI */
        mov TRAP_FRAME_RSP(%rsp), %rax
        lea cpu_stacks(%rip), %rcx
        cmp %rcx, %rax
        jb trap_return                  /* not on a kernel stack */
        add $(MAX_CPUS * CPU_BLOCK_SIZE), %rcx
        cmp %rcx, %rax
        ja trap_return
        /* kernel_return: rax = the interrupted RSP. The two stores below can only land on the
         * frame's rsp/ss slots (the hardware frame ends at or below that RSP), never on the
         * fields still to be read. */
        mov TRAP_FRAME_RFLAGS(%rsp), %rcx
        mov %rcx, -16(%rax)
        mov TRAP_FRAME_RIP(%rsp), %rcx
        mov %rcx, -8(%rax)
        sub $16, %rax
        mov %rax, TRAP_FRAME_ERROR(%rsp) /* the error-code slot holds the new RSP */
        POP_GPRS
        mov 8(%rsp), %rsp               /* -> [RFLAGS, RIP] below the interrupted RSP */
        popfq
        ret
        .globl trap_return
trap_return:
        POP_GPRS
        add $16, %rsp           /* vector, error code */
        iretq
        .size trap_common, . - trap_common

/* ---- #DB: the guest-assisted stepper's fast path --------------------------------------------
 * With the stepper on, every user instruction of a profiled task ends in #DB (TF), so this path
 * runs once per counted instruction, interpreted by the PVM host's emulator: it is kept to about
 * 50 instructions. It builds the same struct trap_frame as the stubs, and when the #DB is a
 * single step (DR6.BS) from ring 3, not at the trampoline, with the stepper on, it reports the
 * step with one WRMSR PMUVM_MSR_STEP = physical address of the frame (the kernel image, and so
 * this IST stack, is identity mapped: virtual = physical), clears DR6 and returns with TF still
 * set. Everything else (and a #GP from the WRMSR, through the exception table) goes to the C
 * handler (trap.c: debug_exception), which sees DR6 unchanged. A frame whose vector the VMM
 * rewrote during the WRMSR (PMUVM_VECTOR_LWP_PAGE_FAULT: LWP's #PF trap, pmuvm_abi.h) goes to
 * trap_dispatch too, after DR6 is cleared: it is a user #PF now. */
        .globl debug_entry
        .type debug_entry, @function
debug_entry:
        pushq $0                /* error code */
        pushq $1                /* vector */
        PUSH_GPRS
        testb $3, TRAP_FRAME_CS(%rsp)
        jz .Ldebug_slow
        cmpb $0, guest_stepper_on(%rip)
        je .Ldebug_slow
        mov %dr6, %rax
        test $0x4000, %eax      /* DR6.BS */
        jz .Ldebug_slow
        movabs $TRAMPOLINE_VA, %rax
        cmp %rax, TRAP_FRAME_RIP(%rsp)
        je .Ldebug_slow
        mov $PV_MSR_STEP, %ecx
        mov %rsp, %rax
        mov %rsp, %rdx
        shr $32, %rdx
.Ldebug_wrmsr:
        wrmsr
        mov $0xFFFF0FF0, %eax
        mov %rax, %dr6
        movq $USER_CS, TRAP_FRAME_CS(%rsp)  /* as set_user_selectors() in kernel.h */
        movq $USER_DS, TRAP_FRAME_SS(%rsp)
        cmpq $1, TRAP_FRAME_VECTOR(%rsp)
        jne .Ldebug_slow        /* the VMM marked an LWP #PF trap: trap.c handles it */
        jmp trap_return
.Ldebug_slow:
        jmp trap_common_saved
        .pushsection __ex_table, "a"
        .balign 8
        .quad .Ldebug_wrmsr, .Ldebug_slow
        .popsection
        .size debug_entry, . - debug_entry

/* void enter_frame(struct trap_frame *f): restore f and iretq (never returns). Used to enter a
 * task from the idle loop; f lies at the top of this CPU's kernel stack. */
        .globl enter_frame
        .type enter_frame, @function
enter_frame:
        mov %rdi, %rsp
        jmp trap_return
        .size enter_frame, . - enter_frame

/* void run_on_stack(uint64_t top, void (*fn)(void)): abandon the current C context, continue in
 * fn on a fresh stack (never returns). */
        .globl run_on_stack
        .type run_on_stack, @function
run_on_stack:
        mov %rdi, %rsp
        xor %ebp, %ebp
        call *%rsi
1:      cli
        hlt
        jmp 1b
        .size run_on_stack, . - run_on_stack

/* ---- syscall trampoline ----------------------------------------------------------------------
 * IA32_LSTAR points at this page, which every task maps user-executable at TRAMPOLINE_VA.
 *
 * Why a single ud2, and no CPL check: SYSCALL leaves RAX = syscall number, RCX = return RIP,
 * R11 = RFLAGS, and every other register belongs to the caller (DESIGN.md §4.4), so the
 * trampoline has no free register for `mov %cs, reg` and no stack it may touch: at CPL 0 (real
 * KVM) RSP is still the user's, and pushing there would clobber the caller's red zone or fault on
 * a bad user RSP with no stack switch. `ud2` enters the kernel in both cases without touching
 * anything:
 *   - PVM host, where SYSCALL "jumps to LSTAR but stays at CPL 3": #UD from CPL 3;
 *   - real KVM, where SYSCALL enters CPL 0 normally: #UD at CPL 0.
 * The #UD gate uses an IST stack (IST_UD), so even the CPL-0 case never runs on the user stack.
 * The #UD handler recognises RIP == TRAMPOLINE_VA (trap.c), turns the frame into the caller's
 * user frame (RIP = RCX, RFLAGS = R11, RSP unchanged) and runs the syscall (syscall.c). */
        .section .trampoline, "ax"
        .balign 4096
        .globl syscall_trampoline
        .type syscall_trampoline, @function
syscall_trampoline:
        ud2
        .size syscall_trampoline, . - syscall_trampoline
        .balign 4096, 0
