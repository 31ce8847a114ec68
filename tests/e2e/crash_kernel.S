/* A minimal guest kernel for the crash cases of guest_boot_test. pmuvm loads it like the bundled
 * kernel (`--kernel FILE`: ELF at 1 MiB, every vCPU enters _start in 64-bit mode with the boot page
 * tables at 0x8000 and an IDT of limit 0). CRASH_MODE picks the crash:
 *   1  triple fault: ud2 with no IDT (#UD -> #DF -> shutdown) -> KVM_EXIT_SHUTDOWN
 *   2  instruction fetch from the 32-bit MMIO hole (no device there): KVM cannot emulate it and
 *      stops with KVM_EXIT_INTERNAL_ERROR
 *   3  the bundled kernel's panic contract (guest/kernel/console.c): a "panic:" line on COM1, then
 *      PMUVM_EXIT_PANIC (3) to the exit port 0x510
 *   4  no crash: 100 loads from the MMIO hole (each a KVM_EXIT_MMIO with no device: reads as
 *      all-ones), then exit status 0 through port 0x510 -- the log must not grow with them
 *   5  no crash: console blocks (PMUVM_PORT_CONSOLE 0x514) that are not wholly in RAM or too
 *      long, which pmuvm must drop, then one good block, then exit status 0
 *   6  no crash: an MSR storm at CPL 0 with interrupts off. A #GP handler skips the faulting
 *      WRMSR/RDMSR (both 2 bytes) and counts it; LWPCBs across the end of RAM and across the
 *      start of the MMIO hole are loaded and announced to the VMM by a user-entry notification
 *      (see there); then every MSR pmuvm implements (LWPMSR0/1,
 *      MISC_ENABLE, the NetBurst range 0x300-0x3FF, the paravirtual 0x40000040-0x4000004F: step,
 *      user entry with whatever LWPCB address was written last, task) is written with 0, all
 *      ones, each of eight single bits and eight pseudo-random values, each write followed by a
 *      RDMSR. Prints "msr storm: N #GP" (N in hex) and "msr storm: survived", exit status 0
 *   7  LWP in ring 3 with a hostile layout: the ring buffer starts three records before the end of
 *      RAM below the MMIO hole (pmuvm_boot_info.ram_size) and the threshold interrupt (after two
 *      records) has vector 0x40, which this kernel's IDT does not reach (limit: vectors 0-14).
 *      The kernel maps RAM for user mode, enables the xAPIC, loads the LWPCB (IRE, interval 64)
 *      at CPL 0 and IRETQs to a ring-3 loop. Expected: the interrupt arrives as #GP with the
 *      IDT bit and vector 0x40 in its error code (the handler EOIs and returns), the fourth
 *      record's store faults with #PF (user write, not present) at the end of RAM, and the #PF
 *      handler prints what it saw and ends the VM with status 0; a loop that ends prints
 *      "ring: no fault" and exits 1
 *   8  a PMI flood the VMM cannot deliver: intel-netburst's IQ_COUNTER0 counts instr_retired at
 *      T0_USR with OVF_PMI_T0, LVTPC says SMI (a delivery mode pmuvm does not support). A ring-3
 *      loop runs INT 0x80 (a DPL-3 gate whose handler presets the counter to -1 and clears
 *      OVF) then one more instruction, 2000 times: each iteration overflows once and raises a
 *      PMI that pmuvm drops. Prints "pmi flood: done", exit status 0; the VMM's log must not
 *      grow with the PMIs
 *   9  an IDT gate near the top of the address space (issue 38 item 1): #PF at 2^64 - 10 KiB;
 *      then intel-netburst's IQ_COUNTER0 counts instr_retired at T0_OS and T0_USR, so the KVM
 *      stepper searches the 8 KiB after each gate for the kernel's returns (they reach the last
 *      page). Prints "entries at the top: survived", exit status 0 */
    .text
    .globl _start
_start:
#if CRASH_MODE == 1
    ud2
#elif CRASH_MODE == 2 || CRASH_MODE == 4
    /* Map guest-physical 0xC0000000 (the hole) at the same linear address with one 2 MiB page:
     * boot PDPT (0x9000) entry 3 -> pd_hole, pd_hole[0] -> 0xC0000000 | PS | W | P. */
    lea pd_hole(%rip), %rax
    or $3, %rax
    mov %rax, 0x9000 + 3 * 8
    mov $0xC0000083, %ecx
    mov %rcx, pd_hole(%rip)
    mov %cr3, %rax
    mov %rax, %cr3
    mov $0xC0000000, %eax
#if CRASH_MODE == 2
    jmp *%rax
#else
    mov $100, %ecx
1:  mov (%rax), %ebx
    dec %ecx
    jnz 1b
    mov $0x510, %dx
    xor %eax, %eax
    out %eax, %dx
2:  hlt
    jmp 2b
#endif
#elif CRASH_MODE == 5
    mov $0x514, %dx
    mov $0xFFFFFFF0, %eax        /* in the MMIO hole, far past RAM */
    out %eax, %dx
    mov $0x0FFFFFFE, %eax        /* its length field straddles the end of 256 MiB of RAM */
    out %eax, %dx
    mov $0x0FFFFFF0, %eax        /* RAM nobody wrote: length 0, nothing to print */
    out %eax, %dx
    mov $huge_block, %eax        /* length 0xFFFFFFFF */
    out %eax, %dx
    mov $long_block, %eax        /* length 257, one more than a block holds */
    out %eax, %dx
    mov $good_block, %eax
    out %eax, %dx
    in %dx, %eax                 /* reads float high; nothing happens */
    mov $0x510, %dx
    xor %eax, %eax
    out %eax, %dx
1:  hlt
    jmp 1b
    .data
    .balign 4
huge_block:
    .long 0xFFFFFFFF
    .ascii "never printed\n"
    .balign 4
long_block:
    .long 257
    .fill 257, 1, 'L'
    .balign 4
good_block:
    .long good_end - good_bytes
good_bytes:
    .ascii "console block: ok\n"
good_end:
#elif CRASH_MODE == 6
    cli                              /* no interrupt may reach the one-gate IDT */
    lea stack_top(%rip), %rsp
    lea idt(%rip), %rdi              /* gate 13 (#GP) */
    mov $13, %esi
    lea gp_handler(%rip), %rax
    call set_gate
    lidt idt_descriptor(%rip)
    /* First LWPCBs across the end of 256 MiB of RAM and across the start of the MMIO hole at
     * 3 GiB (16 of their bytes mapped, the rest past the identity map of RAM): enable LWP with
     * the events CPUID 0x8000001C offers, load each at CPL 0 (its reading is deferred) and
     * announce a return to user mode, which makes pmuvm read it. */
    mov $0x8000001C, %eax
    cpuid
    shr $1, %edx
    and $0xE, %edx
    or $1, %edx
    mov %edx, %eax
    xor %edx, %edx
    mov $0xC0000105, %ecx
    wrmsr
    mov $0x0FFFFFF0, %eax
    call load_lwpcb_at_eax
    mov $0xBFFFFFF0, %eax            /* the same across the start of the MMIO hole (--mem 4096) */
    call load_lwpcb_at_eax
    movabs $0x9E3779B97F4A7C15, %r15 /* the pseudo-random state */
    lea msr_ranges(%rip), %r12
next_range:
    mov (%r12), %r13d                /* first MSR of the range, 0 ends the list */
    test %r13d, %r13d
    jz storm_done
    mov 4(%r12), %r14d               /* MSRs in the range */
    add $8, %r12
next_msr:
    xor %ebx, %ebx                   /* value number 0..17 */
next_value:
    cmp $0, %ebx
    je value_zero
    cmp $1, %ebx
    je value_ones
    cmp $10, %ebx
    jb value_bit
    movabs $6364136223846793005, %rax  /* 10..17: the next pseudo-random value */
    imul %rax, %r15
    movabs $1442695040888963407, %rax
    add %rax, %r15
    mov %r15, %rax
    jmp have_value
value_zero:
    xor %eax, %eax
    jmp have_value
value_ones:
    mov $-1, %rax
    jmp have_value
value_bit:                           /* 2..9: bits 0, 8, 16, ... 56 */
    lea -2(%rbx), %ecx
    shl $3, %ecx
    mov $1, %eax
    shl %cl, %rax
have_value:
    mov %rax, %rdx
    shr $32, %rdx
    mov %r13d, %ecx
    wrmsr
    mov %r13d, %ecx
    rdmsr
    inc %ebx
    cmp $18, %ebx
    jb next_value
    inc %r13d
    dec %r14d
    jnz next_msr
    jmp next_range
storm_done:
    lea storm_count(%rip), %rsi
    call print
    mov gp_count(%rip), %eax
    call print_hex32
    lea storm_end(%rip), %rsi
    call print
    xor %eax, %eax
    jmp exit_guest

load_lwpcb_at_eax:                   /* LLWPCB at CPL 0 (WRMSR LWPMSR1), then user entry */
    xor %edx, %edx
    mov $0xC0000106, %ecx
    wrmsr
    mov $0x40000041, %ecx            /* PMUVM_MSR_USER_ENTRY */
    xor %eax, %eax
    xor %edx, %edx
    wrmsr
    ret

gp_handler:                          /* error code, RIP, CS, RFLAGS, RSP, SS */
    add $8, %rsp
    addq $2, (%rsp)                  /* past the 2-byte WRMSR or RDMSR */
    incq gp_count(%rip)
    iretq

    .data
    .balign 8
idt_descriptor:
    .word 14 * 16 - 1
    .quad idt
msr_ranges:
    .long 0xC0000105, 2              /* LWPMSR0 (LWP_CFG), LWPMSR1 (LWP_CBADDR) */
    .long 0x1A0, 1                   /* IA32_MISC_ENABLE */
    .long 0x300, 0x100               /* the NetBurst counters, CCCRs and ESCRs */
    .long 0x40000040, 0x10           /* pmuvm's paravirtual MSRs */
    .long 0, 0
storm_count:
    .asciz "msr storm: "
storm_end:
    .asciz " #GP\nmsr storm: survived\n"
    .balign 8
gp_count:
    .quad 0
    .bss
    .balign 16
idt:
    .skip 14 * 16
    .balign 4096
stack:
    .skip 8192
stack_top:
#elif CRASH_MODE == 7 || CRASH_MODE == 8
    cli
    lea stack_top(%rip), %rsp
    mov 16(%rdi), %r12               /* pmuvm_boot_info.ram_size */
    mov %r12, ram_end(%rip)
    lea idt(%rip), %rdi              /* gates 13 (#GP) and 14 (#PF): interrupt gates, DPL 0 */
    mov $13, %esi
    lea gp7_handler(%rip), %rax
    call set_gate
    mov $14, %esi
    lea pf7_handler(%rip), %rax
    call set_gate
#if CRASH_MODE == 8
    mov $0x80, %esi                  /* INT 0x80 from ring 3: the gate's DPL is 3 */
    lea rearm_handler(%rip), %rax
    call set_gate
    movw $0xEE00, 0x80 * 16 + 4(%rdi)
#endif
    lidt idt7_descriptor(%rip)
    /* User mode may use the identity map of RAM: U on PML4[0], PDPT[0..3] and their PD entries */
    orq $4, 0x8000
    movabs $0x000FFFFFFFFFF000, %r8
    xor %ecx, %ecx
1:  mov 0x9000(,%rcx,8), %rax
    test $1, %al
    jz 3f
    orq $4, 0x9000(,%rcx,8)
    and %r8, %rax
    xor %edx, %edx
2:  testq $1, (%rax,%rdx,8)
    jz 4f
    orq $4, (%rax,%rdx,8)
4:  inc %edx
    cmp $512, %edx
    jb 2b
3:  inc %ecx
    cmp $4, %ecx
    jb 1b
    /* The xAPIC page, supervisor-only, through PDPT[3] (RAM below the hole ends by 3 GiB), and
     * the APIC software-enabled (SVR), or it would not accept the threshold interrupt */
    lea pd_hole(%rip), %rax
    or $3, %rax
    mov %rax, 0x9000 + 3 * 8
    mov $0xFEE00093, %eax            /* 2 MiB page | PCD | W | P */
    mov %rax, pd_hole + 0x1F7 * 8(%rip)
    mov %cr3, %rax
    mov %rax, %cr3
    mov $0xFEE000F0, %eax
    movl $0x1FF, (%rax)
    lea stack_top(%rip), %rax        /* the boot TSS's RSP0: traps from ring 3 use our stack */
    mov %rax, 0x2004
#if CRASH_MODE == 8
    mov $0xFEE00340, %eax            /* LVTPC: delivery mode SMI (010), not masked */
    movl $0x200, (%rax)
    mov $0x3B8, %ecx                 /* CRU_ESCR0: instr_retired, NBOGUSNTAG, T0_USR */
    mov $(0x02 << 25) | (1 << 9) | 4, %eax
    xor %edx, %edx
    wrmsr
    call rearm_counter
    mov $0x36C, %ecx                 /* CCCR 12: ENABLE, ESCR select 4, any thread, OVF_PMI_T0 */
    mov $(1 << 12) | (4 << 13) | (3 << 16) | (1 << 26), %eax
    xor %edx, %edx
    wrmsr
#else
    /* The LWPCB: ring of 4096 bytes from ram_end - 96, threshold 64 bytes, IRE every 64 */
    lea lwpcb(%rip), %rbx
    movl $4096, 4(%rbx)
    lea -96(%r12), %rax
    mov %rax, 8(%rbx)
    movl $64, 32(%rbx)
    movl $(1 << 26) | 64, 40(%rbx)
    mov $0xC0000105, %ecx            /* LWPMSR0: EN | IRE | INT, vector 0x40 */
    mov $0x80000003, %eax
    mov $0x4000, %edx
    wrmsr
    mov $0xC0000106, %ecx            /* LLWPCB at CPL 0: read at the entry to ring 3 */
    mov %ebx, %eax
    xor %edx, %edx
    wrmsr
#endif
    push $0x1b                       /* SS */
    lea user_stack_top(%rip), %rax
    push %rax                        /* RSP */
    push $0x3202                     /* RFLAGS: IF, IOPL 3 (the loop's OUTs) */
    push $0x23                       /* CS */
    lea user_loop(%rip), %rax
    push %rax                        /* RIP */
    jmp return_to_user

user_loop:                           /* ring 3 */
#if CRASH_MODE == 8
    mov $2000, %ecx
1:  int $0x80
    dec %ecx
    jnz 1b
    lea flood_done(%rip), %rsi
    call print
    mov $0x510, %dx
    xor %eax, %eax
    out %eax, %dx
2:  jmp 2b

rearm_handler:                       /* INT 0x80: IQ_COUNTER0 = -1 (40 bits), CCCR 12 OVF off */
    push %rax
    push %rcx
    push %rdx
    call rearm_counter
    mov $0x36C, %ecx
    rdmsr
    and $0x7FFFFFFF, %eax
    wrmsr
    pop %rdx
    pop %rcx
    pop %rax
    iretq

rearm_counter:
    mov $0x30C, %ecx
    mov $0xFFFFFFFF, %eax
    mov $0xFF, %edx
    wrmsr
    ret
#else
    mov $100000, %ecx
1:  dec %ecx
    jnz 1b
    lea no_fault(%rip), %rsi
    call print
    mov $0x510, %dx
    mov $1, %eax
    out %eax, %dx
2:  jmp 2b
#endif

gp7_handler:                         /* error code, RIP, CS, RFLAGS, RSP, SS */
    testq $2, (%rsp)                 /* IDT bit: an event whose gate is past the limit */
    jz unexpected_gp
    push %rax
    mov 8(%rsp), %rax
    mov %eax, gp_error(%rip)
    incl gp7_count(%rip)
    mov $0xFEE000B0, %eax            /* EOI: the APIC delivered it, though no gate took it */
    movl $0, (%rax)
    pop %rax
    add $8, %rsp
return_to_user:
    iretq

unexpected_gp:
    lea unexpected(%rip), %rsi
    call print
    mov (%rsp), %eax
    call print_hex32
    mov $2, %eax
    jmp exit_guest

pf7_handler:
    lea pf_seen(%rip), %rsi
    call print
    mov %cr2, %rax
    call print_hex32
    lea pf_error(%rip), %rsi
    call print
    mov (%rsp), %eax
    call print_hex32
    lea pf_head(%rip), %rsi
    call print
    mov lwpcb + 16(%rip), %eax
    call print_hex32
    lea pf_ids(%rip), %rsi           /* each stored record's EventId (byte 0): 1 = instructions */
    call print
    mov ram_end(%rip), %rbx
    movzbl -96(%rbx), %eax
    shl $8, %eax
    movb -64(%rbx), %al
    shl $8, %eax
    movb -32(%rbx), %al
    call print_hex32
    lea gp_seen(%rip), %rsi
    call print
    mov gp7_count(%rip), %eax
    call print_hex32
    lea gp_code(%rip), %rsi
    call print
    mov gp_error(%rip), %eax
    call print_hex32
    lea newline(%rip), %rsi
    call print
    xor %eax, %eax
    jmp exit_guest

    .data
    .balign 8
idt7_descriptor:
#if CRASH_MODE == 8
    .word 0x81 * 16 - 1
#else
    .word 15 * 16 - 1
#endif
    .quad idt
flood_done:
    .asciz "pmi flood: done\n"
no_fault:
    .asciz "ring: no fault\n"
unexpected:
    .asciz "ring: unexpected #GP, error "
pf_seen:
    .asciz "ring: #PF at "
pf_error:
    .asciz " error "
pf_head:
    .asciz ", LWPCB head "
pf_ids:
    .asciz ", EventIds "
gp_seen:
    .asciz "\nring: unowned vector #GP x"
gp_code:
    .asciz ", error "
newline:
    .asciz "\n"
    .balign 8
ram_end:
    .quad 0
gp_error:
    .long 0
gp7_count:
    .long 0
    .balign 64
lwpcb:
    .fill 256, 1, 0
    .bss
    .balign 16
idt:
    .skip 0x81 * 16
    .balign 4096
stack:
    .skip 8192
stack_top:
user_stack:
    .skip 4096
user_stack_top:
#elif CRASH_MODE == 9
    cli
    lea stack9_top(%rip), %rsp
    lea idt9(%rip), %rdi
    mov $14, %esi                    /* #PF: 10 KiB below the top of the address space, so the */
    movabs $0xFFFFFFFFFFFFD800, %rax /* 8 KiB searched after it reach the last page */
    call set_gate
    lidt idt9_descriptor(%rip)
    /* Counting starts: the KVM stepper looks for the kernel's returns after LSTAR and the gates */
    mov $0x3B8, %ecx                 /* CRU_ESCR0: instr_retired, NBOGUSNTAG, T0_OS | T0_USR */
    mov $(0x02 << 25) | (1 << 9) | 0xC, %eax
    xor %edx, %edx
    wrmsr
    mov $0x36C, %ecx                 /* CCCR 12: ENABLE, ESCR select 4, any thread */
    mov $(1 << 12) | (4 << 13) | (3 << 16), %eax
    xor %edx, %edx
    wrmsr
    lea top_done(%rip), %rsi
    call print
    xor %eax, %eax
    jmp exit_guest

    .data
    .balign 8
idt9_descriptor:
    .word 15 * 16 - 1
    .quad idt9
top_done:
    .asciz "entries at the top: survived\n"
    .bss
    .balign 16
idt9:
    .skip 15 * 16
    .balign 16
stack9:
    .skip 4096
stack9_top:
#else
    /* Printed inline, not with print below: this mode has no stack (RSP is 0 at entry). */
    lea message(%rip), %rsi
    mov $0x3f8, %dx
1:  movb (%rsi), %al
    test %al, %al
    jz 2f
    out %al, %dx
    inc %rsi
    jmp 1b
2:  mov $0x510, %dx
    mov $3, %eax
    out %eax, %dx
3:  hlt
    jmp 3b
message:
    .asciz "panic: crash_kernel: deliberate panic for the exit-status test\n"
#endif

#if CRASH_MODE >= 6
/* Helpers of the modes that print and handle faults (6-9). */
    .text
set_gate:                            /* IDT at %rdi, vector %esi: 64-bit interrupt gate, DPL 0,
                                        CS 0x08, to the handler at %rax */
    shl $4, %esi
    add %rdi, %rsi
    mov %ax, 0(%rsi)
    movw $0x08, 2(%rsi)
    movw $0x8E00, 4(%rsi)
    shr $16, %rax
    mov %ax, 6(%rsi)
    shr $16, %rax
    mov %eax, 8(%rsi)
    ret

exit_guest:                          /* at CPL 0: the guest's exit status %eax through port
                                        0x510, then halted for good */
    mov $0x510, %dx
    out %eax, %dx
1:  hlt
    jmp 1b

print:                               /* the NUL-terminated string at %rsi to COM1 */
    mov $0x3f8, %dx
1:  movb (%rsi), %al
    test %al, %al
    jz 2f
    out %al, %dx
    inc %rsi
    jmp 1b
2:  ret

print_hex32:                         /* %eax as eight hex digits on COM1 */
    mov %eax, %ebx
    mov $8, %ecx
1:  rol $4, %ebx
    mov %ebx, %eax
    and $0xF, %eax
    movb hex_digits(%rax), %al
    mov $0x3f8, %dx
    out %al, %dx
    dec %ecx
    jnz 1b
    ret

    .data
hex_digits:
    .ascii "0123456789abcdef"
#endif

    .bss
    .balign 4096
pd_hole:
    .skip 4096
