/* calls_known: a static program with no C library whose call tree and every user instruction are
 * known, for Debian's perf record --call-graph lbr in the guest (perf_checks_arch):
 *     _start:     jmp calls_main                            1
 *     calls_main: mov $OUTER, %ebx                          1
 *     .Louter:    call f1                                   OUTER  times, per pass:
 *     f1:         call f2                                     1
 *     f2:         call f3                                     1
 *     f3:         mov $INNER, %ecx                            1
 *     .Linner:    dec %ecx; jnz .Linner                       2 INNER
 *                 ret (f3, f2, f1)                            3
 *                 dec %ebx; jnz .Louter  (calls_main)         2
 *                 mov $60, %eax; xor %edi, %edi; syscall    3      (exit 0)
 * 2 INNER + 9 instructions a pass, 5 + OUTER (2 INNER + 9) in all: OUTER 200, INNER 50 give
 * 21805. Inside f3 the calls not yet returned from are f2's, f1's and calls_main's: the LBR call
 * stack (tests/e2e/linux_stepper_test.cc derives each sample's chain from this listing). */
#define OUTER 200
#define INNER 50
        .text
        .globl _start, calls_main, f1, f2, f3
_start:
        jmp calls_main
calls_main:
        mov $OUTER, %ebx
.Louter:
        call f1
        dec %ebx
        jnz .Louter
        mov $60, %eax
        xor %edi, %edi
        syscall
f1:
        call f2
        ret
f2:
        call f3
        ret
f3:
        mov $INNER, %ecx
.Linner:
        dec %ecx
        jnz .Linner
        ret
