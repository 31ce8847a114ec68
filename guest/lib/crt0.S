/* Process entry for the guest programs (SysV x86-64 convention, as the kernel lays it out):
 * RSP -> argc, argv[0..argc-1], NULL, envp NULL, auxv. Calls main(argc, argv) with a 16-byte
 * aligned stack and exits with its return value. */
/* guest/abi/pmuvm_abi.h is C only; PMUVM_SYS_EXIT is 0. */
#define SYS_EXIT 0

        .section .text.start, "ax"
        .globl _start
        .type _start, @function
_start:
        xor %ebp, %ebp
        mov (%rsp), %rdi        /* argc */
        lea 8(%rsp), %rsi       /* argv */
        and $-16, %rsp
        call main
        mov %eax, %edi
        mov $SYS_EXIT, %eax
        syscall
1:      jmp 1b                  /* exit does not return */
        .size _start, . - _start
