/* lwp_basic: LLWPCB/SLWPCB round trips through the kernel's #UD emulation.
 * Checks: LLWPCB writes Flags; SLWPCB returns the LWPCB address; LLWPCB 0 disables LWP (SLWPCB
 * then returns 0); the XOP.W = 1 forms; register operands other than RAX (ModRM.rm and XOP.B);
 * SLWPCB with XOP.W = 0 zero-extends; the emulated instructions leave other registers alone.
 * Prints one PASS/FAIL line per check and exits 1 if any check failed. */
#include "guest/lib/lwp.h"
#include "guest/lib/pmuvm.h"

static struct lwpcb cb;
static uint8_t ring[64 * LWP_RECORD_SIZE] __attribute__((aligned(4096)));
static int passed, failed;

static void check(int ok, const char *what, uint64_t got, uint64_t want) {
  if (ok) {
    ++passed;
    printf_("lwp_basic: PASS: %s\n", what);
  } else {
    ++failed;
    printf_("lwp_basic: FAIL: %s (got %#llx, expected %#llx)\n", what, (unsigned long long)got,
            (unsigned long long)want);
  }
}

/* llwpcb r9 (XOP.B = 0 selects r8-r15; W = 1). Returns rax afterwards (must be unchanged). */
static uint64_t llwpcb_r9(const void *p, uint64_t rax_in) {
  uint64_t rax = rax_in;
  register uint64_t r9 __asm__("r9") = (uint64_t)(uintptr_t)p;
  __asm__ volatile(".byte 0x8f, 0xc9, 0xf8, 0x12, 0xc1" : "+a"(rax), "+r"(r9) : : "memory");
  return rax;
}

/* slwpcb rdx (W = 1), with rax preserved. */
static uint64_t slwpcb_rdx(uint64_t *rax_inout) {
  uint64_t rdx = 0x1111111111111111ull;
  __asm__ volatile(".byte 0x8f, 0xe9, 0xf8, 0x12, 0xca" : "+d"(rdx), "+a"(*rax_inout) : : "memory");
  return rdx;
}

/* slwpcb eax (W = 0) with garbage in the upper half of rax beforehand. */
static uint64_t slwpcb_eax_dirty(void) {
  uint64_t rax = 0xDEADBEEF00000000ull | 0x12345678u;
  __asm__ volatile(".byte 0x8f, 0xe9, 0x78, 0x12, 0xc8" : "+a"(rax) : : "memory");
  return rax;
}

int main(void) {
  struct lwp_info info;
  long r = sys_lwp_info(&info);
  printf_("lwp_basic: lwp_info -> %ld: eax=%#x ebx=%#x ecx=%#x edx=%#x\n", r, info.eax, info.ebx,
          info.ecx, info.edx);
  if (r != 0 || !(info.eax & LWP_EN)) {
    printf_("lwp_basic: FAIL: LWP is not enabled (CPUID 8000001C EAX[0] clear)\n");
    return 1;
  }
  const unsigned max_events = (info.ebx >> 16) & 0xFF;
  const unsigned lwpcb_size = info.ebx & 0xFF;
  check(lwpcb_size <= sizeof cb, "LWPCBSize fits struct lwpcb", lwpcb_size, sizeof cb);
  check(max_events >= 1, "at least one event slot", max_events, 1);

  /* The first enabled event, in slot 0, with a long interval (nothing needs to be recorded). */
  unsigned event = (info.eax & LWP_IRE) ? LWP_EVENT_INSTRUCTIONS
                   : (info.eax & LWP_BRE) ? LWP_EVENT_BRANCHES
                                          : LWP_EVENT_DCACHE_MISSES;
  memset(&cb, 0, sizeof cb);
  cb.buffer_size = sizeof ring;
  cb.buffer_base = (uint64_t)(uintptr_t)ring;
  cb.events[0].interval_id = lwp_event(event, 100000);
  cb.flags = 0xFFFFFFFFu; /* must be overwritten by LLWPCB */

  void *previous = llwpcb(&cb);
  check(previous == 0, "LLWPCB returns the previous LWPCB address (none)",
        (uint64_t)(uintptr_t)previous, 0);
  const uint32_t flags = *(volatile uint32_t *)&cb.flags;
  const uint32_t want_flags = LWP_EN | (1u << event);
  check((flags & ~LWP_INT) == want_flags, "LLWPCB writes Flags = EN | event bit", flags, want_flags);
  void *got = slwpcb();
  check(got == &cb, "SLWPCB returns the LWPCB address", (uint64_t)(uintptr_t)got,
        (uint64_t)(uintptr_t)&cb);
  check(slwpcb_eax_dirty() == (uint64_t)(uintptr_t)&cb, "SLWPCB eax (W=0) zero-extends",
        slwpcb_eax_dirty(), (uint64_t)(uintptr_t)&cb);
  previous = llwpcb(0);
  check(previous == &cb, "LLWPCB 0 returns the previous LWPCB address",
        (uint64_t)(uintptr_t)previous, (uint64_t)(uintptr_t)&cb);
  got = slwpcb();
  check(got == 0, "LLWPCB 0 disables LWP (SLWPCB returns 0)", (uint64_t)(uintptr_t)got, 0);

  /* 64-bit forms and other registers. */
  llwpcb64(&cb);
  got = slwpcb64();
  check(got == &cb, "LLWPCB/SLWPCB rax with XOP.W=1", (uint64_t)(uintptr_t)got,
        (uint64_t)(uintptr_t)&cb);
  llwpcb64(0);
  const uint64_t rax_after = llwpcb_r9(&cb, 0x0123456789ABCDEFull);
  check(rax_after == 0x0123456789ABCDEFull, "LLWPCB r9 leaves rax alone", rax_after,
        0x0123456789ABCDEFull);
  uint64_t rax = 0x0F0E0D0C0B0A0908ull;
  const uint64_t rdx = slwpcb_rdx(&rax);
  check(rdx == (uint64_t)(uintptr_t)&cb, "SLWPCB rdx after LLWPCB r9", rdx,
        (uint64_t)(uintptr_t)&cb);
  check(rax == 0x0F0E0D0C0B0A0908ull, "SLWPCB rdx leaves rax alone", rax, 0x0F0E0D0C0B0A0908ull);
  llwpcb(0);
  got = slwpcb();
  check(got == 0, "LLWPCB 0 again disables LWP", (uint64_t)(uintptr_t)got, 0);

  printf_("lwp_basic: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
