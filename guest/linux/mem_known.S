/* mem_known: a static program with no C library whose every user instruction and data access is
 * known, for MEM_INST_RETIRED under Debian's perf in the guest (perf_checks_arch):
 *     _start:   mov $LOOPS, %ecx                           1
 *               push %rcx                                  1      store (the stack)
 *     mem_load: mov (%rsp), %rax                           LOOPS  load
 *     mem_rmw:  add %rax, (%rsp)                           LOOPS  load and store
 *               dec %ecx                                   LOOPS
 *               jnz mem_load                               LOOPS
 *               pop %rax                                   1      load
 *               mov $60, %eax; xor %edi, %edi; syscall     3      (exit 0)
 * 4 LOOPS + 6 instructions retired at CPL 3; 2 LOOPS + 1 of them load (ALL_LOADS) and LOOPS + 1
 * store (ALL_STORES). LOOPS = 10000 (guest/linux/BUILD): 40006, 20001, 10001.
 * Every access is to one stack slot: after the push has brought its line into the L1, every load
 * and store hits it (the cache model's L1 latency: 4 cycles in intel-skylake). In program order
 * load n is mem_load for odd n and mem_rmw for even n up to 2 LOOPS (then the pop); store 1 is
 * the push, stores 2 .. LOOPS + 1 are mem_rmw's. */
#ifndef LOOPS
#define LOOPS 10000
#endif
        .text
        .globl _start, mem_load, mem_rmw
_start:
        mov $LOOPS, %ecx
        push %rcx
mem_load:
        mov (%rsp), %rax
mem_rmw:
        add %rax, (%rsp)
        dec %ecx
        jnz mem_load
        pop %rax
        mov $60, %eax
        xor %edi, %edi
        syscall
