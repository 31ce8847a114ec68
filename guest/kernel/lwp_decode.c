#include "guest/kernel/lwp_decode.h"

bool lwp_decode(const uint8_t b[LWP_INSN_LENGTH], struct lwp_insn *out) {
  if (b[0] != 0x8F) return false;            /* XOP escape */
  if ((b[1] & 0x1F) != 0x09) return false;   /* map 9 */
  if ((b[2] & 0x7F) != 0x78) return false;   /* vvvv = 1111 (unused), L = 0, pp = 00 */
  if (b[3] != 0x12) return false;            /* opcode */
  if ((b[4] & 0xC0) != 0xC0) return false;   /* ModRM.mod = 11: register operand only */
  const unsigned op = (b[4] >> 3) & 7;
  if (op > 1) return false;                  /* /0 LLWPCB, /1 SLWPCB (/2, /3 are LWPINS/VAL) */
  out->slwpcb = op == 1;
  out->wide = (b[2] & 0x80) != 0;
  out->reg = (b[4] & 7u) | ((b[1] & 0x20) ? 0u : 8u);
  return true;
}
