/* loop_known: a static program with no C library whose every user instruction is known, for
 * Debian's perf in the guest (perf stat / record / report / script over a whole process):
 *     _start:   mov $100000, %ecx                          1
 *     loop_dec: dec %ecx                                   100000
 *     loop_jnz: jnz loop_dec                               100000 (99999 taken)
 *               mov $60, %eax; xor %edi, %edi; syscall     3      (exit 0)
 * 200004 instructions retired at CPL 3, 100000 of them branches. Sampling every P instructions
 * (perf record -c P) interrupts after instruction k*P; the sampled IP is the next one: loop_dec
 * when k*P is odd, loop_jnz when it is even (for k*P up to 200001). */
        .text
        .globl _start, loop_dec, loop_jnz
_start:
        mov $100000, %ecx
loop_dec:
        dec %ecx
loop_jnz:
        jnz loop_dec
        mov $60, %eax
        xor %edi, %edi
        syscall
