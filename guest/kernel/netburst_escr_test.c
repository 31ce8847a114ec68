/* Host unit test of the NetBurst counter/ESCR table (netburst_escr.h). Checks the structure of
 * the table (pairs share ESCRs, second pairs use ESCR MSR + 1, IQ 16/17 follow the IQ pairs),
 * the examples of spec/netburst-escr-cccr-notes-ja.txt (CRU_ESCR0 = select 4 for IQ_COUNTER0,
 * FSB_ESCR0 = select 6 for BPU_COUNTER0) and that every ESCR is in 0x3A0..0x3E1. */
#include "guest/kernel/host_test.h"
#include "guest/kernel/netburst_escr.h"

int main(void) {
  /* Examples from the notes. */
  CHECK(netburst_escr_msr(12, 4) == 0x3B8); /* IQ_COUNTER0, CRU_ESCR0 */
  CHECK(netburst_escr_msr(0, 6) == 0x3A2);  /* BPU_COUNTER0, FSB_ESCR0 */
  CHECK(netburst_escr_msr(0, 7) == 0x3A0);  /* BSU_ESCR0 */
  CHECK(netburst_escr_msr(14, 4) == 0x3B9); /* CRU_ESCR1 */
  CHECK(netburst_escr_msr(12, 5) == 0x3CC); /* CRU_ESCR2: branch_retired */
  CHECK(netburst_escr_msr(4, 2) == 0x3C2);  /* TBPU_ESCR0 */

  const unsigned first_pairs[] = {0, 4, 8, 12};
  for (unsigned g = 0; g < 4; ++g) {
    const unsigned c = first_pairs[g];
    for (unsigned s = 0; s < 8; ++s) {
      const uint32_t a = netburst_escr_msr(c, s);
      CHECK(netburst_escr_msr(c + 1, s) == a);             /* a pair shares its ESCRs */
      CHECK(netburst_escr_msr(c + 2, s) == netburst_escr_msr(c + 3, s));
      const uint32_t b = netburst_escr_msr(c + 2, s);
      if (a && b) CHECK(b == a + 1);                        /* *_ESCR1 = *_ESCR0 + 1 */
      if (c == 12 && s == 3) CHECK(a == 0x3BE && b == 0);   /* SSU_ESCR0 has no twin */
      else CHECK((a == 0) == (b == 0));
    }
  }
  for (unsigned s = 0; s < 8; ++s) {
    CHECK(netburst_escr_msr(16, s) == netburst_escr_msr(12, s));
    CHECK(netburst_escr_msr(17, s) == netburst_escr_msr(14, s));
  }
  unsigned distinct = 0;
  uint32_t seen[64];
  for (unsigned c = 0; c < NETBURST_COUNTER_COUNT; ++c)
    for (unsigned s = 0; s < 8; ++s) {
      const uint32_t m = netburst_escr_msr(c, s);
      if (!m) continue;
      CHECK(m >= 0x3A0 && m <= 0x3E1);
      unsigned k = 0;
      while (k < distinct && seen[k] != m) ++k;
      if (k == distinct && distinct < 64) seen[distinct++] = m;
    }
  CHECK(distinct == 45); /* the 45 ESCRs */
  CHECK(netburst_escr_msr(18, 0) == 0);
  CHECK(netburst_escr_msr(0, 8) == 0);
  return host_test_finish("netburst_escr_test");
}
