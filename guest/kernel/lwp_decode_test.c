/* Host unit test of the LLWPCB/SLWPCB decoder (lwp_decode.h), against encodings that GNU
 * binutils produces/decodes (objdump shows 8f e9 78 12 c0 as `llwpcb %eax`, 8f c9 f8 12 c1 as
 * `llwpcb %r9`). */
#include "guest/kernel/host_test.h"
#include "guest/kernel/lwp_decode.h"

static int decode(uint8_t b0, uint8_t b1, uint8_t b2, uint8_t b3, uint8_t b4, struct lwp_insn *out) {
  const uint8_t b[5] = {b0, b1, b2, b3, b4};
  return lwp_decode(b, out);
}

int main(void) {
  struct lwp_insn i;
  /* The forms DESIGN.md §4.3 names (XOP.W = 0: 32-bit operand). */
  CHECK(decode(0x8f, 0xe9, 0x78, 0x12, 0xc0, &i) && !i.slwpcb && !i.wide && i.reg == 0);
  CHECK(decode(0x8f, 0xe9, 0x78, 0x12, 0xc8, &i) && i.slwpcb && !i.wide && i.reg == 0);
  /* W = 1: 64-bit. */
  CHECK(decode(0x8f, 0xe9, 0xf8, 0x12, 0xc0, &i) && !i.slwpcb && i.wide && i.reg == 0);
  CHECK(decode(0x8f, 0xe9, 0xf8, 0x12, 0xca, &i) && i.slwpcb && i.wide && i.reg == 2);
  /* Every register: ModRM.rm plus inverted XOP.B. */
  for (unsigned r = 0; r < 16; ++r) {
    const uint8_t b1 = (uint8_t)((r >= 8 ? 0xC0 : 0xE0) | 0x09);
    CHECK(decode(0x8f, b1, 0xf8, 0x12, (uint8_t)(0xC0 | (r & 7)), &i) && i.reg == r && !i.slwpcb);
    CHECK(decode(0x8f, b1, 0x78, 0x12, (uint8_t)(0xC8 | (r & 7)), &i) && i.reg == r && i.slwpcb);
  }
  CHECK(decode(0x8f, 0xc9, 0xf8, 0x12, 0xc1, &i) && i.reg == 9 && i.wide);
  /* XOP.R and XOP.X (stored inverted, bits 7 and 6) are ignored for the register form. */
  CHECK(decode(0x8f, 0x09, 0x78, 0x12, 0xc3, &i) && i.reg == 11); /* R=X=B=1 */
  CHECK(decode(0x8f, 0x29, 0x78, 0x12, 0xc3, &i) && i.reg == 3);  /* R=X=1, B=0 */
  /* Not LLWPCB/SLWPCB: */
  CHECK(!decode(0x8e, 0xe9, 0x78, 0x12, 0xc0, &i));  /* not the XOP escape */
  CHECK(!decode(0x8f, 0xe8, 0x78, 0x12, 0xc0, &i));  /* map 8 */
  CHECK(!decode(0x8f, 0xea, 0x78, 0x12, 0xc0, &i));  /* map 10 (LWPINS/LWPVAL live there) */
  CHECK(!decode(0x8f, 0xe9, 0x70, 0x12, 0xc0, &i));  /* vvvv != 1111 */
  CHECK(!decode(0x8f, 0xe9, 0x7c, 0x12, 0xc0, &i));  /* L = 1 */
  CHECK(!decode(0x8f, 0xe9, 0x79, 0x12, 0xc0, &i));  /* pp != 00 */
  CHECK(!decode(0x8f, 0xe9, 0x78, 0x13, 0xc0, &i));  /* other opcode */
  CHECK(!decode(0x8f, 0xe9, 0x78, 0x12, 0x00, &i));  /* memory operand */
  CHECK(!decode(0x8f, 0xe9, 0x78, 0x12, 0x80, &i));  /* memory operand, disp32 */
  CHECK(!decode(0x8f, 0xe9, 0x78, 0x12, 0xd0, &i));  /* /2 */
  CHECK(!decode(0x8f, 0xe9, 0x78, 0x12, 0xf8, &i));  /* /7 */
  return host_test_finish("lwp_decode_test");
}
