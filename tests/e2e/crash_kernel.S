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
 *      long, which pmuvm must drop, then one good block, then exit status 0 */
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
#else
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

    .bss
    .balign 4096
pd_hole:
    .skip 4096
