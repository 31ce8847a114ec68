/* loop_known: a static program with no C library whose every user instruction is known, for
 * Debian's perf in the guest (perf stat / record / report / script over a whole process):
 *     _start:   mov $LOOPS, %ecx                           1
 *     loop_dec: dec %ecx                                   LOOPS
 *     loop_jnz: jnz loop_dec                               LOOPS (LOOPS - 1 taken)
 *               mov $60, %eax; xor %edi, %edi; syscall     3      (exit 0)
 * 2 LOOPS + 4 instructions retired at CPL 3, LOOPS of them branches: loop_known has LOOPS =
 * 100000 (200004), loop_small 10000 (20004; guest/linux/BUILD). Sampling every P instructions
 * (perf record -c P) interrupts after instruction k*P; the sampled IP is the next one: loop_dec
 * when k*P is odd, loop_jnz when it is even (for k*P up to 2 LOOPS + 1). */
#ifndef LOOPS
#define LOOPS 100000
#endif
        .text
        .globl _start, loop_dec, loop_jnz
_start:
        mov $LOOPS, %ecx
loop_dec:
        dec %ecx
loop_jnz:
        jnz loop_dec
        mov $60, %eax
        xor %edi, %edi
        syscall
