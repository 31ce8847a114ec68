/* Input for check_no_forbidden_insns_self_test: one instruction of each forbidden kind. Never
 * linked into anything. */
        .text
        .globl bad_code
bad_code:
        movaps %xmm0, %xmm1
        vaddps %ymm1, %ymm2, %ymm3
        paddd %mm0, %mm1
        fld %st(1)
        xsave (%rax)
        xrstor (%rax)
        fxsave (%rax)
        lock cmpxchg16b (%rax)
        int3
        int $0x80
        endbr64
        ud2
        mfence
        tzcnt %rax, %rbx
        ret
        .globl syscall_trampoline
syscall_trampoline:
        ud2
