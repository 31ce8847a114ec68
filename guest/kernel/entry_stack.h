/* The SysV x86-64 process entry block on a new task's stack, kept free of kernel state so that
 * it is unit-tested on the host (entry_stack_test.c).
 *
 * Layout (addresses grow upwards):
 *   rsp ->  argc
 *           argv[0] .. argv[argc-1]   (pointers to the strings below)
 *           NULL                      (end of argv)
 *           NULL                      (envp: empty)
 *           0, 0                      (auxv: AT_NULL)
 *           padding
 *           the argument strings      (ending at most at `top`, starting 16-byte aligned)
 * rsp is 16-byte aligned. */
#ifndef PMUVM_GUEST_KERNEL_ENTRY_STACK_H_
#define PMUVM_GUEST_KERNEL_ENTRY_STACK_H_

#include <stdbool.h>
#include <stdint.h>

/* `kview` is where the kernel can write the user range [bottom, top). `args` holds `argc`
 * NUL-terminated strings in `size` bytes. Returns false (writing nothing) if the arguments are
 * malformed or do not fit; otherwise stores the user RSP in *rsp. */
bool build_entry_stack(uint8_t *kview, uint64_t bottom, uint64_t top, const char *args,
                       uint64_t size, uint64_t argc, uint64_t *rsp);

#endif /* PMUVM_GUEST_KERNEL_ENTRY_STACK_H_ */
