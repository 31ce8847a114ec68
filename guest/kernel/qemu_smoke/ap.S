/* AP trampoline, copied to 0x7000 by the shim (SIPI vector 7). Real mode -> long mode with the
 * shim's page tables at 0x8000 -> kernel _start with RDI = 0x3000, RSI = index. */
#include "guest/kernel/qemu_smoke/long_mode_setup.h"
        .section .rodata
        .globl ap_tramp, ap_tramp_end
#define A(x) ((x) - ap_tramp + 0x7000)
ap_tramp:
        .code16
        cli
        xor %ax, %ax
        mov %ax, %ds
        lgdtl A(ap_gdt_ptr)
        mov %cr0, %eax
        or $1, %eax
        mov %eax, %cr0
        ljmpl $0x18, $A(ap32)
        .code32
ap32:
        mov $0x10, %ax
        mov %ax, %ds
        mov %ax, %es
        mov %ax, %ss
        LONG_MODE_SETUP
        mov $0x80050033, %eax
        mov %eax, %cr0
        ljmp $0x08, $A(ap64)
        .code64
ap64:
        mov $1, %eax
        lock xadd %eax, A(ap_counter)
        inc %eax
        mov %eax, %esi
        mov $0x3000, %edi
        mov A(ap_entry), %rax
        xor %esp, %esp
        xor %ebp, %ebp
        jmp *%rax
        .balign 8
ap_gdt:
        .quad 0
        .quad 0x00AF9B000000FFFF   /* 0x08 code64 */
        .quad 0x00CF93000000FFFF   /* 0x10 data */
        .quad 0x00CF9B000000FFFF   /* 0x18 code32 */
ap_gdt_ptr:
        .word 31
        .long A(ap_gdt)
        .balign 8
        .globl ap_counter_off, ap_entry_off
ap_counter:
        .long 0
        .long 0
ap_entry:
        .quad 0
ap_tramp_end:
        .balign 8
ap_counter_off: .quad ap_counter - ap_tramp
ap_entry_off: .quad ap_entry - ap_tramp
