/* Which ESCR feeds which NetBurst counter: IA-32 SDM, Pentium 4 performance-monitoring counters
 * and their ESCRs (the CCCR's ESCR-select field, bits 15:13, picks one of a counter's ESCRs).
 * Unit-tested on the host (netburst_escr_test.c). */
#ifndef PMUVM_GUEST_KERNEL_NETBURST_ESCR_H_
#define PMUVM_GUEST_KERNEL_NETBURST_ESCR_H_

#include <stdint.h>

#define NETBURST_COUNTER_COUNT 18

/* The ESCR MSR that ESCR select `select` (0-7) names for `counter` (0-17), or 0 if none. */
uint32_t netburst_escr_msr(unsigned counter, unsigned select);

#endif /* PMUVM_GUEST_KERNEL_NETBURST_ESCR_H_ */
