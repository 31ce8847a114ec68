/* Decoding of the LWP control instructions (AMD XOP encodings), kept free of kernel state so
 * that it is unit-tested on the host (lwp_decode_test.c) as well as used by the #UD handler.
 *
 *   LLWPCB reg: 8F  RXB.01001  W.1111.0.00  12  11.000.rrr
 *   SLWPCB reg: 8F  RXB.01001  W.1111.0.00  12  11.001.rrr
 * R, X, B are stored inverted; the register is rrr + 8 * B. W = 1: 64-bit operand, W = 0:
 * 32-bit (LLWPCB uses the low half, SLWPCB zero-extends). Anything else is not an LWP control
 * instruction (the #UD stands). */
#ifndef PMUVM_GUEST_KERNEL_LWP_DECODE_H_
#define PMUVM_GUEST_KERNEL_LWP_DECODE_H_

#include <stdbool.h>
#include <stdint.h>

#define LWP_INSN_LENGTH 5

struct lwp_insn {
  bool slwpcb;   /* false: LLWPCB */
  bool wide;     /* XOP.W: 64-bit operand */
  unsigned reg;  /* 0 rax, 1 rcx, 2 rdx, 3 rbx, 4 rsp, 5 rbp, 6 rsi, 7 rdi, 8..15 r8..r15 */
};

bool lwp_decode(const uint8_t bytes[LWP_INSN_LENGTH], struct lwp_insn *out);

#endif /* PMUVM_GUEST_KERNEL_LWP_DECODE_H_ */
