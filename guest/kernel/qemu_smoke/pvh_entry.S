/* PVH entry of the QEMU smoke-test shim (qemu_smoke/run.py): 32-bit protected mode, paging off.
 * Builds identity page tables at 0x8000 (4 GiB, 2 MiB pages) like vmm/boot/long_mode.cc, enters
 * long mode and calls shim_main (shim.c). */
#include "guest/kernel/qemu_smoke/long_mode_setup.h"
        .section .note.Xen, "a"
        .balign 4
        .long 4          /* name size */
        .long 4          /* desc size */
        .long 18         /* XEN_ELFNOTE_PHYS32_ENTRY */
        .asciz "Xen"
        .long _start32
        .text
        .code32
        .globl _start32
_start32:
        cli
        mov $stack_top, %esp
        /* zero 0x8000..0xE000 */
        mov $0x8000, %edi
        xor %eax, %eax
        mov $(0x6000 / 4), %ecx
        rep stosl
        movl $(0x9000 | 3), 0x8000
        /* PDPT[g] -> PD g */
        mov $0, %ecx
1:      mov %ecx, %eax
        shl $12, %eax
        add $(0xA000 | 3), %eax
        mov %eax, 0x9000(,%ecx,8)
        inc %ecx
        cmp $4, %ecx
        jb 1b
        /* PD entries: 2048 x 2 MiB */
        mov $0, %ecx
2:      mov %ecx, %eax
        shl $21, %eax
        or $0x83, %eax
        mov %eax, 0xA000(,%ecx,8)
        mov %ecx, %eax
        shr $11, %eax
        mov %eax, 0xA004(,%ecx,8)
        inc %ecx
        cmp $2048, %ecx
        jb 2b
        lgdt gdt32_ptr
        LONG_MODE_SETUP
        mov %cr0, %eax
        or $0x80050033, %eax
        mov %eax, %cr0
        ljmp $0x08, $start64
        .code64
start64:
        mov $0x10, %ax
        mov %ax, %ds
        mov %ax, %es
        mov %ax, %ss
        mov $stack_top, %rsp
        call shim_main
3:      hlt
        jmp 3b

        .globl jump_to_kernel   /* (entry, boot_info, index) */
jump_to_kernel:
        push $0x2
        popfq
        mov %rdi, %rax
        mov %rsi, %rdi
        mov %rdx, %rsi
        xor %esp, %esp
        xor %ebp, %ebp
        jmp *%rax

        .data
        .balign 16
gdt32:
        .quad 0
        .quad 0x00AF9B000000FFFF
        .quad 0x00CF93000000FFFF
gdt32_ptr:
        .word 23
        .long gdt32
        .bss
        .balign 16
        .space 65536
stack_top:
